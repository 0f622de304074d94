// A fake of Google Cloud Storage's JSON API on loopback for the GCS source's tests, with the
// services its credentials come from, Node's standard library alone:
// - objects: GET /storage/v1/b/BUCKET/o/OBJECT?alt=media, ranges and an ETag, served from
//   DIRECTORY/BUCKET/OBJECT; GET /storage/v1/b/BUCKET/o?prefix=&delimiter=/&pageToken= lists.
//   Every request's token is checked: a Bearer token must be one this server issued and still
//   live; without one, only the bucket "public" answers.
// - the OAuth2 token endpoint (POST /token): a service account's JWT (RFC 7523) is verified with
//   the account's public key (RS256, its iss, aud, scope, iat and exp); an authorized user's
//   refresh token is checked with its client's id and secret.
// - the metadata server (GET /computeMetadata/v1/instance/service-accounts/default/token),
//   which answers only requests that carry "Metadata-Flavor: Google".
//
// Usage: node gcs_server.mjs DIRECTORY. Writes DIRECTORY/service-account.json (a fresh RSA key),
// DIRECTORY/foreign-service-account.json (the same account, a key the server does not know)
// and DIRECTORY/authorized-user.json, whose token_uri is this server, then prints "port N".
// GET /__counts: requests served, answered 404 (missing), refused and expired, tokens issued by kind, assertions
// refused. GET /__config?NAME=VALUE&...: statedSeconds (the expires_in tokens state, default
// 3600), hardMs (a token's real life, 0: none), delayMs (each ranged GET waits this long first),
// pageSize (entries a listing page holds, default 1000), lie ("listing": a listing names an
// object outside its prefix; "etag": every ranged GET after the first carries another ETag).
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const root = path.resolve(process.argv[2]);
const objects = path.join(root, 'objects');
fs.mkdirSync(objects, { recursive: true });
const CLIENT_EMAIL = 'loader@hoist-test.iam.gserviceaccount.com';
const SCOPE = 'https://www.googleapis.com/auth/devstorage.read_only';
const USER = { client_id: 'user-client.apps.googleusercontent.com', client_secret: 'user-secret',
               refresh_token: 'user-refresh-token' };
const PUBLIC_BUCKET = 'public';
const { publicKey, privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });

const counts = { served: 0, missing: 0, refused: 0, expired: 0, anonymous: 0, rejectedAssertions: 0,
                 issued: { serviceAccount: 0, user: 0, metadata: 0 } };
const config = { statedSeconds: 3600, hardMs: 0, delayMs: 0, pageSize: 1000, lie: '' };
const tokens = new Map();  // token -> the time it stops working
let port = 0;
let ranged = 0;

function send(res, status, body, headers = {}) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text),
                          ...headers });
  res.end(text);
}

function issue(kind) {
  counts.issued[kind]++;
  const token = `ya29.${kind}-${crypto.randomBytes(24).toString('base64url')}`;
  tokens.set(token, config.hardMs ? Date.now() + config.hardMs : Infinity);
  return { access_token: token, expires_in: config.statedSeconds, token_type: 'Bearer' };
}

async function bodyOf(req) {
  const parts = [];
  for await (const part of req) parts.push(part);
  return Buffer.concat(parts).toString();
}

// Why a JWT bearer assertion is refused, or '' when it holds.
function assertionFault(assertion) {
  const parts = (assertion || '').split('.');
  if (parts.length !== 3) return 'Invalid JWT: not three parts';
  const [head, claims, signature] = parts;
  const ok = crypto.verify('RSA-SHA256', Buffer.from(`${head}.${claims}`), publicKey,
                           Buffer.from(signature, 'base64url'));
  if (!ok) return 'Invalid JWT Signature.';
  let h;
  let c;
  try {
    h = JSON.parse(Buffer.from(head, 'base64url').toString());
    c = JSON.parse(Buffer.from(claims, 'base64url').toString());
  } catch {
    return 'Invalid JWT: not JSON';
  }
  const now = Date.now() / 1000;
  if (h.alg !== 'RS256') return `Invalid JWT: alg ${h.alg}`;
  if (c.iss !== CLIENT_EMAIL) return 'Invalid JWT: iss';
  if (c.aud !== `http://127.0.0.1:${port}/token`) return `Invalid JWT: aud ${c.aud}`;
  if (c.scope !== SCOPE) return `Invalid JWT: scope ${c.scope}`;
  if (!(Math.abs(c.iat - now) < 300) || !(c.exp > c.iat) || c.exp - c.iat > 3600) {
    return 'Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.';
  }
  return '';
}

async function token(req, res) {
  const form = new URLSearchParams(await bodyOf(req));
  const grant = form.get('grant_type');
  if (grant === 'urn:ietf:params:oauth:grant-type:jwt-bearer') {
    const fault = assertionFault(form.get('assertion'));
    if (fault) {
      counts.rejectedAssertions++;
      return send(res, 400, { error: 'invalid_grant', error_description: fault });
    }
    return send(res, 200, issue('serviceAccount'));
  }
  if (grant === 'refresh_token') {
    if (form.get('client_id') !== USER.client_id || form.get('client_secret') !== USER.client_secret) {
      return send(res, 401, { error: 'invalid_client', error_description: 'Unauthorized' });
    }
    if (form.get('refresh_token') !== USER.refresh_token) {
      return send(res, 400, { error: 'invalid_grant', error_description: 'Bad Request' });
    }
    return send(res, 200, issue('user'));
  }
  return send(res, 400, { error: 'unsupported_grant_type', error_description: `Invalid grant_type: ${grant}` });
}

function gcsError(res, status, message) {
  if (status === 404) counts.missing++;
  else counts.refused++;
  send(res, status, { error: { code: status, message, errors: [{ message, reason: 'required' }] } });
}

// Whether the request may read `bucket`; when not, it has been answered.
function authorized(req, res, bucket, what) {
  const header = req.headers.authorization || '';
  if (!header) {
    if (bucket === PUBLIC_BUCKET) {
      counts.anonymous++;
      return true;
    }
    gcsError(res, 401, `Anonymous caller does not have storage.objects.${what} access to the ` +
                       `Google Cloud Storage bucket ${bucket}.`);
    return false;
  }
  const t = header.startsWith('Bearer ') ? header.slice(7) : '';
  const until = tokens.get(t);
  if (until === undefined) {
    gcsError(res, 401, 'Invalid Credentials');
    return false;
  }
  if (Date.now() > until) {
    counts.expired++;
    gcsError(res, 401, 'Invalid Credentials');
    return false;
  }
  return true;
}

// Every object of a bucket, by name, sorted.
function objectsOf(bucket) {
  const base = path.join(objects, bucket);
  const names = [];
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else names.push(path.relative(base, full).split(path.sep).join('/'));
    }
  };
  if (fs.existsSync(base)) walk(base);
  return names.sort();
}

function list(req, res, bucket, query) {
  if (!authorized(req, res, bucket, 'list')) return;
  const prefix = query.get('prefix') || '';
  const delimiter = query.get('delimiter') || '';
  const after = query.get('pageToken') ? Buffer.from(query.get('pageToken'), 'base64url').toString() : '';
  const entries = [];
  const seen = new Set();
  for (const name of objectsOf(bucket)) {
    if (!name.startsWith(prefix)) continue;
    const rest = name.slice(prefix.length);
    const cut = delimiter ? rest.indexOf(delimiter) : -1;
    const entry = cut < 0 ? { item: name } : { prefix: prefix + rest.slice(0, cut + 1) };
    const key = entry.item || entry.prefix;
    if (seen.has(key) || key <= after) continue;
    seen.add(key);
    entries.push(entry);
  }
  entries.sort((a, b) => ((a.item || a.prefix) < (b.item || b.prefix) ? -1 : 1));
  const page = entries.slice(0, config.pageSize);
  const answer = { kind: 'storage#objects' };
  const items = page.filter((e) => e.item).map((e) => ({ kind: 'storage#object', name: e.item, bucket }));
  if (config.lie === 'listing') items.push({ kind: 'storage#object', name: `${prefix}../secret.safetensors`, bucket });
  if (items.length) answer.items = items;
  const prefixes = page.filter((e) => e.prefix).map((e) => e.prefix);
  if (prefixes.length) answer.prefixes = prefixes;
  if (entries.length > page.length) {
    const last = page[page.length - 1];
    answer.nextPageToken = Buffer.from(last.item || last.prefix).toString('base64url');
  }
  counts.served++;
  send(res, 200, answer);
}

async function media(req, res, bucket, object) {
  if (!authorized(req, res, bucket, 'get')) return;
  const base = path.join(objects, bucket);
  const file = path.resolve(base, object);
  if (!file.startsWith(base + path.sep) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    return gcsError(res, 404, `No such object: ${bucket}/${object}`);
  }
  const stat = fs.statSync(file);
  const size = stat.size;
  let etag = `"${crypto.createHash('md5').update(`${file}:${stat.mtimeMs}:${size}`).digest('hex')}"`;
  const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range || '');
  if (range) {
    if (config.lie === 'etag' && ranged++ > 0) etag = `"changed-${ranged}"`;
    if (config.delayMs) await new Promise((resolve) => setTimeout(resolve, config.delayMs));
    const first = Number(range[1]);
    const last = Math.min(range[2] === '' ? size - 1 : Number(range[2]), size - 1);
    if (first >= size) {
      res.writeHead(416, { 'Content-Range': `bytes */${size}` });
      return res.end();
    }
    res.writeHead(206, { 'Content-Type': 'application/octet-stream', 'Content-Length': last - first + 1,
                         'Content-Range': `bytes ${first}-${last}/${size}`, ETag: etag,
                         'X-Goog-Generation': String(Math.floor(stat.mtimeMs)) });
    counts.served++;
    return fs.createReadStream(file, { start: first, end: last }).pipe(res);
  }
  res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': size, ETag: etag });
  counts.served++;
  return req.method === 'HEAD' ? res.end() : fs.createReadStream(file).pipe(res);
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1');
  const parts = url.pathname.split('/');
  try {
    if (url.pathname === '/__counts') return send(res, 200, counts);
    if (url.pathname === '/__config') {
      for (const [name, value] of url.searchParams) config[name] = name === 'lie' ? value : Number(value);
      ranged = 0;
      return send(res, 200, config);
    }
    if (req.method === 'POST' && url.pathname === '/token') return await token(req, res);
    if (url.pathname === '/computeMetadata/v1/instance/service-accounts/default/token') {
      if (req.headers['metadata-flavor'] !== 'Google') {
        return send(res, 403, 'Missing Metadata-Flavor header', { 'Metadata-Flavor': 'Google' });
      }
      return send(res, 200, issue('metadata'), { 'Metadata-Flavor': 'Google' });
    }
    // /storage/v1/b/BUCKET/o[/OBJECT]
    if (parts[1] === 'storage' && parts[2] === 'v1' && parts[3] === 'b' && parts[5] === 'o') {
      const bucket = decodeURIComponent(parts[4]);
      if (parts.length === 6) return list(req, res, bucket, url.searchParams);
      if (parts.length === 7 && url.searchParams.get('alt') === 'media') {
        return await media(req, res, bucket, decodeURIComponent(parts[6]));
      }
    }
    return gcsError(res, 404, `Not Found: ${url.pathname}`);
  } catch (e) {
    return send(res, 500, { error: { code: 500, message: String(e) } });
  }
});

server.listen(0, '127.0.0.1', () => {
  port = server.address().port;
  const tokenUri = `http://127.0.0.1:${port}/token`;
  fs.writeFileSync(path.join(root, 'service-account.json'), JSON.stringify({
    type: 'service_account', project_id: 'hoist-test', private_key_id: 'key-1',
    private_key: privateKey.export({ type: 'pkcs8', format: 'pem' }), client_email: CLIENT_EMAIL,
    client_id: '1', token_uri: tokenUri }, null, 2));
  // The same account with a key the server does not know: its assertions are refused.
  const foreign = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  fs.writeFileSync(path.join(root, 'foreign-service-account.json'), JSON.stringify({
    type: 'service_account', private_key_id: 'key-2',
    private_key: foreign.export({ type: 'pkcs8', format: 'pem' }), client_email: CLIENT_EMAIL,
    token_uri: tokenUri }, null, 2));
  fs.writeFileSync(path.join(root, 'authorized-user.json'), JSON.stringify({
    type: 'authorized_user', ...USER, token_uri: tokenUri }, null, 2));
  console.log(`port ${port}`);
});
