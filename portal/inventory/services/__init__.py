"""Inventory's services: stock (parts and movements), warranties, RMA cases."""
