"""Download names built from data (a GPU's serial, a photo's uploaded name) go through Django's
`content_disposition_header`: quotes, semicolons, line breaks and non-ASCII never become header syntax."""

import re
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.utils import timezone
from django.utils.http import content_disposition_header

import portal
from portal.checklists.models import ChecklistPhoto, ChecklistRun, ChecklistTemplate
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db

NAMES = [
    ('a"b;c', 'filename="rma-a\\"b;c.{ext}"'),
    ("ü-名", "filename*=utf-8''rma-%C3%BC-%E5%90%8D.{ext}"),
    ("x\r\nSet-Cookie: y=1", "filename*=utf-8''rma-x%0D%0ASet-Cookie%3A%20y%3D1.{ext}"),
    ("a\nb", "filename*=utf-8''rma-a%0Ab.{ext}"),
    ("back\\slash", 'filename="rma-back\\\\slash.{ext}"'),
]


@pytest.mark.parametrize(("serial", "expected"), NAMES, ids=[repr(n) for n, _ in NAMES])
def test_rma_downloads_are_named_by_django(client_for, viewer, serial, expected):
    gpu = GpuFactory(serial=serial)
    for ext in ("pdf", "json"):
        response = client_for(viewer).get(f"/reports/gpus/{gpu.uuid}/rma.{ext}")
        assert response.status_code == 200
        assert response["Content-Disposition"] == "attachment; " + expected.format(ext=ext)


@pytest.mark.parametrize("name", ['a"b;c.png', "ü-名.png", "x\r\nSet-Cookie: y=1.png"])
def test_checklist_photo_is_named_by_django(client_for, viewer, technician, media_root, name):
    host = HostFactory()
    template = ChecklistTemplate.objects.create(key="t", name="T", record_kind="cleaning")
    run = ChecklistRun.objects.create(template=template, template_version=1, template_name="T",
                                      record_kind="cleaning", host=host, started_at=timezone.now(),
                                      started_by=technician)  # fmt: skip
    photo = ChecklistPhoto(run=run, item_key="photo", original_name=name, content_type="image/png", size_bytes=3,
                           width=1, height=1, uploaded_by=technician, uploaded_at=timezone.now())  # fmt: skip
    photo.file.save("p.png", ContentFile(b"png"), save=True)
    response = client_for(viewer).get(photo.get_absolute_url())
    assert response.status_code == 200
    assert response["Content-Disposition"] == content_disposition_header(False, name)
    assert "\n" not in response["Content-Disposition"] and "\r" not in response["Content-Disposition"]
    response.close()


def test_no_download_header_is_built_by_hand():
    """Every Content-Disposition comes from content_disposition_header (directly, through
    portal.core.exports.attachment, or FileResponse's own), never from a formatted string."""
    root = Path(portal.__file__).parent
    by_hand = re.compile(r"""Content-Disposition["']\]\s*=(?!\s*content_disposition_header\()""")
    offenders = [str(path.relative_to(root)) for path in root.rglob("*.py") if by_hand.search(path.read_text())]
    assert offenders == []
