// Azurite (Microsoft's emulator of Azure Blob Storage, from npm) for the Azure source's tests,
// with fakes of the services Entra ID tokens come from, on loopback:
// - Azurite's Blob service over HTTPS (a fresh self-signed certificate, DIRECTORY/cert.pem), its
//   OAuth check on ("basic": a bearer token's issuer, audience and life), in memory. Azurite
//   checks every request's Shared Key signature, SAS or token itself. Every file under
//   DIRECTORY/objects/CONTAINER/ is uploaded to CONTAINER (Put Blob, signed with the emulator's
//   key); the container "public" allows anonymous reads of its blobs.
// - POST /TENANT/oauth2/v2.0/token: workload identity. The client assertion must be the text of
//   DIRECTORY/federated-token, the client id "hoist-client", the scope Storage's.
// - GET /metadata/identity/oauth2/token: the instance metadata service; only requests with
//   "Metadata: true" and Storage's resource are answered.
// - GET /identity: App Service's identity endpoint; X-IDENTITY-HEADER must be "identity-secret".
// Tokens are JWTs as Entra ID writes them (sts.windows.net issuer, Storage's audience).
//
// Usage: node azure_server.mjs DIRECTORY. Writes DIRECTORY/federated-token, DIRECTORY/sas-token
// (an account SAS that reads and lists blobs for a day) and DIRECTORY/azurite.json
// ({"blobPort"}), then prints "port N" (the token services' port) once
// every upload is done. GET /__counts: tokens issued by kind, refused requests. GET
// /__config?statedSeconds=N: the life tokens state and carry (default 3600).
import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(process.argv[2]);
const here = path.dirname(fileURLToPath(import.meta.url));
const ACCOUNT = 'devstoreaccount1';
const KEY = Buffer.from(
  'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==',
  'base64');
const VERSION = '2021-08-06';
const TENANT = '72f988bf-86f1-41af-91ab-2d7cd011db47';
const CLIENT = 'hoist-client';
const IDENTITY_SECRET = 'identity-secret';
const federated = `eyJhbGciOiJSUzI1NiJ9.${crypto.randomBytes(24).toString('base64url')}.sig`;
const counts = { refused: 0, issued: { workload: 0, imds: 0, appService: 0 } };
const config = { statedSeconds: 3600 };

fs.mkdirSync(path.join(root, 'objects'), { recursive: true });
fs.writeFileSync(path.join(root, 'federated-token'), `${federated}\n`);
execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
                         '-nodes', '-keyout', path.join(root, 'key.pem'), '-out',
                         path.join(root, 'cert.pem'), '-days', '1', '-subj', '/CN=127.0.0.1',
                         '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
const ca = fs.readFileSync(path.join(root, 'cert.pem'));

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

const blobPort = await freePort();
const azurite = spawn(process.execPath, [
  path.join(here, 'node_modules/azurite/dist/src/blob/main.js'), '--blobHost', '127.0.0.1',
  '--blobPort', String(blobPort), '--inMemoryPersistence', '--silent', '--disableTelemetry',
  '--skipApiVersionCheck', '--disableProductStyleUrl', '--oauth', 'basic',
  '--cert', path.join(root, 'cert.pem'), '--key', path.join(root, 'key.pem')],
  { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] });
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => { azurite.kill('SIGKILL'); process.exit(0); });
}
process.on('exit', () => azurite.kill('SIGKILL'));
azurite.on('exit', (code) => { console.error(`azurite exited (${code})`); process.exit(1); });

// One request to Azurite signed with the account's Shared Key.
function blobRequest(method, pathAndQuery, headers = {}, body = null) {
  const date = new Date().toUTCString();
  const all = { 'x-ms-date': date, 'x-ms-version': VERSION, ...headers };
  if (body) all['Content-Length'] = String(body.length);
  const url = new URL(`https://127.0.0.1:${blobPort}/${ACCOUNT}${pathAndQuery}`);
  const ms = Object.keys(all).filter((k) => k.toLowerCase().startsWith('x-ms-'))
    .map((k) => [k.toLowerCase(), all[k]]).sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, v]) => `${k}:${v}\n`).join('');
  const query = [...url.searchParams.entries()].map(([k, v]) => [k.toLowerCase(), v])
    .sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => `\n${k}:${v}`).join('');
  const length = body && body.length > 0 ? String(body.length) : '';
  const toSign = `${method}\n\n\n${length}\n\n${all['Content-Type'] || ''}\n\n\n\n\n\n\n${ms}` +
                 `/${ACCOUNT}${url.pathname}${query}`;
  all.Authorization = `SharedKey ${ACCOUNT}:` +
                      crypto.createHmac('sha256', KEY).update(toSign, 'utf8').digest('base64');
  return new Promise((resolve, reject) => {
    const req = https.request(url, { method, headers: all, ca }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(parts).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function upload() {
  for (let i = 0; ; ++i) {  // Azurite listens within a few seconds
    try {
      await blobRequest('GET', '?comp=list');
      break;
    } catch (e) {
      if (i > 300) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const containers = fs.readdirSync(path.join(root, 'objects'));
  for (const container of new Set([...containers, 'models', 'public'])) {
    const headers = container === 'public' ? { 'x-ms-blob-public-access': 'blob' } : {};
    const made = await blobRequest('PUT', `/${container}?restype=container`, headers);
    if (made.status !== 201) throw new Error(`creating ${container}: ${made.status} ${made.body}`);
    const dir = path.join(root, 'objects', container);
    if (!fs.existsSync(dir)) continue;
    for (const file of fs.readdirSync(dir, { recursive: true })) {
      const full = path.join(dir, file);
      if (!fs.statSync(full).isFile()) continue;
      const name = file.split(path.sep).map(encodeURIComponent).join('/');
      const put = await blobRequest('PUT', `/${container}/${name}`,
                                    { 'x-ms-blob-type': 'BlockBlob' }, fs.readFileSync(full));
      if (put.status !== 201) throw new Error(`uploading ${file}: ${put.status} ${put.body}`);
    }
  }
}

function send(res, status, body) {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function refuse(res, status, error, description) {
  counts.refused++;
  return send(res, status, { error, error_description: description });
}

// A JWT as Entra ID issues one for Storage (Azurite reads its claims; its signature is not
// checked there).
function issue(kind, stringLife) {
  counts.issued[kind]++;
  const now = Math.floor(Date.now() / 1000);
  const head = Buffer.from(JSON.stringify({ typ: 'JWT', alg: 'RS256' })).toString('base64url');
  const claims = Buffer.from(JSON.stringify({
    aud: 'https://storage.azure.com', iss: `https://sts.windows.net/${TENANT}/`, iat: now,
    nbf: now - 60, exp: now + config.statedSeconds, oid: kind, tid: TENANT,
    jti: crypto.randomBytes(8).toString('hex') })).toString('base64url');
  const token = `${head}.${claims}.${crypto.randomBytes(32).toString('base64url')}`;
  const life = stringLife ? String(config.statedSeconds) : config.statedSeconds;
  return { access_token: token, expires_in: life, token_type: 'Bearer',
           resource: 'https://storage.azure.com/' };
}

async function bodyOf(req) {
  const parts = [];
  for await (const part of req) parts.push(part);
  return Buffer.concat(parts).toString();
}

const tokens = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1');
  if (url.pathname === '/__counts') return send(res, 200, counts);
  if (url.pathname === '/__config') {
    for (const [k, v] of url.searchParams) config[k] = Number(v);
    return send(res, 200, config);
  }
  if (req.method === 'POST' && url.pathname === `/${TENANT}/oauth2/v2.0/token`) {
    const form = new URLSearchParams(await bodyOf(req));
    if (form.get('grant_type') !== 'client_credentials' || form.get('client_id') !== CLIENT) {
      return refuse(res, 400, 'unauthorized_client', 'AADSTS700016: the client is not known');
    }
    if (form.get('client_assertion_type') !== 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer' ||
        form.get('client_assertion') !== federated) {
      return refuse(res, 401, 'invalid_client', 'AADSTS700211: no matching federated identity');
    }
    if (form.get('scope') !== 'https://storage.azure.com/.default') {
      return refuse(res, 400, 'invalid_scope', `AADSTS70011: scope ${form.get('scope')}`);
    }
    return send(res, 200, issue('workload', false));
  }
  if (url.pathname === '/metadata/identity/oauth2/token') {
    if (req.headers.metadata !== 'true') return refuse(res, 400, 'bad_request', 'Required metadata header not specified');
    if (url.searchParams.get('resource') !== 'https://storage.azure.com/') {
      return refuse(res, 400, 'invalid_resource', 'the resource is not Storage');
    }
    return send(res, 200, issue('imds', true));
  }
  if (url.pathname === '/identity') {
    if (req.headers['x-identity-header'] !== IDENTITY_SECRET) {
      return refuse(res, 401, 'unauthorized', 'the identity header is wrong');
    }
    return send(res, 200, issue('appService', true));
  }
  return send(res, 404, { error: 'not_found' });
});

// An account SAS (version 2019-12-12's string to sign): blobs, read and list, over HTTPS, a day.
function accountSas() {
  const expiry = new Date(Date.now() + 86400e3).toISOString().replace(/\.\d+Z$/, 'Z');
  const fields = { sv: '2019-12-12', ss: 'b', srt: 'sco', sp: 'rl', se: expiry, spr: 'https' };
  const toSign = [ACCOUNT, fields.sp, fields.ss, fields.srt, '', fields.se, '', fields.spr,
                  fields.sv, ''].join('\n');
  const sig = crypto.createHmac('sha256', KEY).update(toSign, 'utf8').digest('base64');
  return new URLSearchParams({ ...fields, sig }).toString();
}

await upload();
fs.writeFileSync(path.join(root, 'sas-token'), accountSas());
tokens.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(path.join(root, 'azurite.json'), JSON.stringify({ blobPort }));
  console.log(`port ${tokens.address().port}`);
});
