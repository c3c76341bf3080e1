// A real OpenID Connect provider for the tests (panva's oidc-provider, certified by the OpenID
// Foundation), on a loopback port: one confidential client with PKCE required, people read from a
// JSON file at every request (the tests change their groups between two sign-ins, or while a
// sign-in is open: a refresh reads them again), and its own login page that checks passwords. The
// client gets a refresh token with every code, as Keycloak gives one; `<client_id>-no-refresh` is
// the same client without one, as some providers answer. Usage: node provider.mjs CONFIG.json; prints "READY <issuer>".
import { generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const people = () => JSON.parse(readFileSync(config.people_file, 'utf8'));
const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key-1', use: 'sig', alg: 'RS256' };

const provider = new Provider(config.issuer, {
  clients: [
    { client_id: config.client_id, grant_types: ['authorization_code', 'refresh_token'] },
    { client_id: `${config.client_id}-no-refresh`, grant_types: ['authorization_code'] },
  ].map((client) => ({
    ...client,
    client_secret: config.client_secret,
    redirect_uris: config.redirect_uris,
    post_logout_redirect_uris: config.post_logout_redirect_uris,
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  })),
  // oidc-provider's default wants the offline_access scope and a consent prompt for a refresh token.
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  pkce: { required: () => true },
  jwks: { keys: [signingKey] },
  cookies: { keys: ['oidc-provider-test-only-cookie-key'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'given_name', 'family_name', 'preferred_username'],
    groups: ['groups'],
  },
  ttl: { IdToken: config.id_token_ttl || 3600, AccessToken: 3600, AuthorizationCode: 60, Session: 3600, Interaction: 600, Grant: 3600 },
  features: { devInteractions: { enabled: false }, rpInitiatedLogout: { enabled: true } },
  async findAccount(ctx, id) {
    const person = people()[id];
    if (!person) return undefined;
    return {
      accountId: id,
      async claims() {
        const current = people()[id] || {};
        return {
          sub: id,
          email: current.email,
          email_verified: true,
          given_name: current.given_name,
          family_name: current.family_name,
          name: `${current.given_name} ${current.family_name}`,
          preferred_username: id,
          groups: current.groups || [],
        };
      },
    };
  },
});

const loginPage = (uid, message) => `<!DOCTYPE html><html><head><meta charset="utf-8"><title>Lab sign-in</title></head>
<body><h1>Lab sign-in (test provider)</h1>${message ? `<p role="alert">${escape(message)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<label>User name <input name="login" autocomplete="username" autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Sign in</button></form></body></html>`;

const readForm = (req) => new Promise((resolve, reject) => {
  let data = '';
  req.on('data', (chunk) => { data += chunk; });
  req.on('end', () => resolve(new URLSearchParams(data)));
  req.on('error', reject);
});

async function finish(ctx, details, accountId) {
  const grant = new provider.Grant({ accountId, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const grantId = await grant.save();
  const result = { login: { accountId }, consent: { grantId } };
  ctx.redirect(await provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: false }));
}

provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([^/]+)(\/login)?$/);
  if (!match) return next();
  const details = await provider.interactionDetails(ctx.req, ctx.res);
  ctx.set('Cache-Control', 'no-store');
  if (ctx.method === 'GET') {
    if (details.prompt.name === 'consent' && details.session?.accountId) {
      return finish(ctx, details, details.session.accountId);
    }
    ctx.type = 'html';
    ctx.body = loginPage(details.uid);
    return undefined;
  }
  const form = await readForm(ctx.req);
  const login = form.get('login') || '';
  const person = people()[login];
  if (!person || person.password !== form.get('password')) {
    ctx.status = 401;
    ctx.type = 'html';
    ctx.body = loginPage(details.uid, 'Wrong user name or password.');
    return undefined;
  }
  return finish(ctx, details, login);
});

provider.listen(config.port, '127.0.0.1', () => {
  process.stdout.write(`READY ${config.issuer}\n`);
});
