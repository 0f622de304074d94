// An S3-compatible server on loopback for the S3 source's tests: s3rver (npm) stores the
// objects and answers S3's API; in front of it, every signed request's AWS Signature V4 is
// computed again with AWS's own signer (@smithy/signature-v4, what the AWS SDK for JavaScript
// signs with) and refused as S3 refuses it when it differs, because s3rver checks only the
// access key of a V4 request.
//
// The same port also fakes the services temporary credentials come from, each issuing keys the
// signature check then takes, with their session token and, where the test sets one, a life
// after which the key is refused as expired: STS's AssumeRoleWithWebIdentity (POST /), the
// container credentials endpoint (GET /__container/creds), the instance metadata service's
// IMDSv2 (/latest/...), IAM Identity Center's portal (GET /federation/credentials, which takes
// the sign-in token "sso-access-token" for account 123456789012's role "loader-sso").
//
// Usage: node s3_server.mjs DIRECTORY BUCKET...   Prints "port N" once it listens.
// Credentials: access key S3RVER, secret S3RVER (s3rver's own account).
// GET /__counts: what was signed, refused, expired and issued. GET /__config?NAME=VALUE&...:
// statedSeconds (the Expiration issued keys state, default 3600), hardMs (a key's real life,
// 0: none), delayMs (each ranged GET waits this long first).
import crypto from 'node:crypto';
import S3rver from 's3rver';
import { SignatureV4 } from '@smithy/signature-v4';
import { Hash } from '@smithy/hash-node';

const secrets = new Map([['S3RVER', 'S3RVER']]);
const counts = { signed: 0, refused: 0, expired: 0, issued: { sts: 0, container: 0, imds: 0, sso: 0 } };
const config = { statedSeconds: 3600, hardMs: 0, delayMs: 0 };
// What the fakes accept: the role and web identity token STS takes, the container endpoint's
// authorization token.
const ROLE_ARN = 'arn:aws:iam::123456789012:role/loader';
const WEB_IDENTITY_TOKEN = 'web-identity-token';
const CONTAINER_TOKEN = 'container-authorization-token';
const IMDS_ROLE = 'loader-role';
const SSO_TOKEN = 'sso-access-token';
const issued = new Map();  // access key -> { token, hard }
const imdsSessions = new Set();
let serial = 0;

function issue(kind) {
  counts.issued[kind]++;
  const key = `ASIA${kind.toUpperCase()}${++serial}`;
  const secret = crypto.randomBytes(30).toString('base64');
  const token = crypto.randomBytes(48).toString('base64');
  secrets.set(key, secret);
  issued.set(key, { token, hard: config.hardMs ? Date.now() + config.hardMs : Infinity });
  const expiration = new Date(Date.now() + config.statedSeconds * 1000).toISOString();
  return { key, secret, token, expiration };
}

async function bodyOf(req) {
  const parts = [];
  for await (const part of req) parts.push(part);
  return Buffer.concat(parts).toString();
}

function stsError(ctx, status, code, message) {
  ctx.status = status;
  ctx.type = 'text/xml';
  ctx.body = `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error>` +
             `<Type>Sender</Type><Code>${code}</Code><Message>${message}</Message></Error>` +
             `<RequestId>1</RequestId></ErrorResponse>`;
}

async function credentialServices(ctx, next) {
  if (ctx.method === 'POST' && ctx.path === '/') {
    const form = new URLSearchParams(await bodyOf(ctx.req));
    if (form.get('Action') !== 'AssumeRoleWithWebIdentity') {
      return stsError(ctx, 400, 'InvalidAction', 'Could not find operation.');
    }
    if (form.get('RoleArn') !== ROLE_ARN || form.get('WebIdentityToken') !== WEB_IDENTITY_TOKEN ||
        !form.get('RoleSessionName')) {
      return stsError(ctx, 403, 'AccessDenied',
                      'Not authorized to perform sts:AssumeRoleWithWebIdentity');
    }
    const c = issue('sts');
    ctx.type = 'text/xml';
    ctx.body = `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">` +
               `<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>${c.key}</AccessKeyId>` +
               `<SecretAccessKey>${c.secret}</SecretAccessKey><SessionToken>${c.token}</SessionToken>` +
               `<Expiration>${c.expiration}</Expiration></Credentials>` +
               `<AssumedRoleUser><Arn>${ROLE_ARN}/s</Arn></AssumedRoleUser>` +
               `</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`;
    return undefined;
  }
  if (ctx.path === '/__container/creds') {
    if (ctx.get('authorization') !== CONTAINER_TOKEN) {
      ctx.status = 401;
      ctx.body = JSON.stringify({ code: 'Unauthorized', message: 'not authorized' });
      return undefined;
    }
    const c = issue('container');
    ctx.body = JSON.stringify({ AccessKeyId: c.key, SecretAccessKey: c.secret, Token: c.token,
                                Expiration: c.expiration, RoleArn: ROLE_ARN });
    return undefined;
  }
  if (ctx.path === '/federation/credentials') {
    if (ctx.get('x-amz-sso_bearer_token') !== SSO_TOKEN) {
      ctx.status = 401;
      ctx.body = JSON.stringify({ message: 'Session token not found or invalid' });
      return undefined;
    }
    if (ctx.query.account_id !== '123456789012' || ctx.query.role_name !== 'loader-sso') {
      ctx.status = 403;
      ctx.body = JSON.stringify({ message: 'No access' });
      return undefined;
    }
    const c = issue('sso');
    ctx.body = JSON.stringify({ roleCredentials: { accessKeyId: c.key, secretAccessKey: c.secret,
                                                   sessionToken: c.token,
                                                   expiration: Date.parse(c.expiration) } });
    return undefined;
  }
  if (ctx.path === '/latest/api/token') {
    if (ctx.method !== 'PUT' || !ctx.get('x-aws-ec2-metadata-token-ttl-seconds')) {
      ctx.status = 400;
      return undefined;
    }
    const session = crypto.randomBytes(16).toString('hex');
    imdsSessions.add(session);
    ctx.body = session;
    return undefined;
  }
  if (ctx.path.startsWith('/latest/meta-data/iam/security-credentials/')) {
    if (!imdsSessions.has(ctx.get('x-aws-ec2-metadata-token'))) {
      ctx.status = 401;
      return undefined;
    }
    const role = ctx.path.slice('/latest/meta-data/iam/security-credentials/'.length);
    if (role === '') {
      ctx.body = `${IMDS_ROLE}\n`;
    } else if (role === IMDS_ROLE) {
      const c = issue('imds');
      ctx.body = JSON.stringify({ Code: 'Success', Type: 'AWS-HMAC', AccessKeyId: c.key,
                                  SecretAccessKey: c.secret, Token: c.token,
                                  Expiration: c.expiration });
    } else {
      ctx.status = 404;
    }
    return undefined;
  }
  if (config.delayMs && ctx.get('range')) {
    await new Promise((resolve) => setTimeout(resolve, config.delayMs));
  }
  return next();
}

function refuse(ctx, status, code, message) {
  counts.refused++;
  ctx.status = status;
  ctx.type = 'application/xml';
  ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code>` +
             `<Message>${message}</Message></Error>`;
}

// The query as the signer takes it: decoded names and values, repeated names as arrays.
function parseQuery(raw) {
  const query = {};
  if (!raw) return query;
  for (const part of raw.split('&')) {
    if (!part) continue;
    const eq = part.indexOf('=');
    const name = decodeURIComponent(eq < 0 ? part : part.slice(0, eq));
    const value = eq < 0 ? '' : decodeURIComponent(part.slice(eq + 1).replace(/\+/g, '%20'));
    if (name in query) {
      query[name] = [].concat(query[name], value);
    } else {
      query[name] = value;
    }
  }
  return query;
}

async function verifySignature(ctx, next) {
  const auth = ctx.get('authorization');
  if (!auth) return next();
  const m = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/.exec(auth);
  if (!m) {
    return refuse(ctx, 400, 'AuthorizationHeaderMalformed',
                  'The authorization header is malformed.');
  }
  const [, keyId, day, region, signedHeaders, signature] = m;
  const secret = secrets.get(keyId);
  if (secret === undefined) {
    return refuse(ctx, 403, 'InvalidAccessKeyId',
                  'The AWS Access Key Id you provided does not exist in our records.');
  }
  const temporary = issued.get(keyId);
  if (temporary !== undefined) {
    if (ctx.get('x-amz-security-token') !== temporary.token) {
      return refuse(ctx, 403, 'InvalidToken',
                    'The provided token is malformed or otherwise invalid.');
    }
    if (Date.now() > temporary.hard) {
      counts.expired++;
      return refuse(ctx, 400, 'ExpiredToken', 'The provided token has expired.');
    }
  }
  if (!ctx.get('x-amz-content-sha256')) {
    return refuse(ctx, 400, 'InvalidRequest',
                  'Missing required header for this request: x-amz-content-sha256');
  }
  const amzDate = ctx.get('x-amz-date');
  const when = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(amzDate);
  if (!when || amzDate.slice(0, 8) !== day) {
    return refuse(ctx, 403, 'AccessDenied', 'X-Amz-Date is missing or does not match the credential.');
  }
  const names = signedHeaders.split(';');
  const headers = {};
  for (const name of names) {
    const value = ctx.req.headers[name];
    if (value === undefined) {
      return refuse(ctx, 403, 'SignatureDoesNotMatch', `The signed header ${name} is missing.`);
    }
    headers[name] = Array.isArray(value) ? value.join(',') : value;
  }
  const url = ctx.req.url;
  const q = url.indexOf('?');
  const signer = new SignatureV4({
    credentials: { accessKeyId: keyId, secretAccessKey: secret },
    region,
    service: 's3',
    sha256: Hash.bind(null, 'sha256'),
    uriEscapePath: false,  // S3 signs the path as sent, encoded once
    applyChecksum: false,  // the x-amz-content-sha256 sent is the one signed
  });
  const signed = await signer.sign({
    method: ctx.method,
    protocol: 'http:',
    hostname: ctx.hostname,
    path: q < 0 ? url : url.slice(0, q),
    query: parseQuery(q < 0 ? '' : url.slice(q + 1)),
    headers,
  }, {
    signingDate: new Date(`${when[1]}-${when[2]}-${when[3]}T${when[4]}:${when[5]}:${when[6]}Z`),
    signableHeaders: new Set(names),
  });
  const expected = /Signature=([0-9a-f]{64})/.exec(signed.headers.authorization)[1];
  if (expected !== signature) {
    return refuse(ctx, 403, 'SignatureDoesNotMatch',
                  'The request signature we calculated does not match the signature you provided. ' +
                  'Check your key and signing method.');
  }
  counts.signed++;
  if (issued.has(keyId)) {
    // s3rver knows its own account alone: a temporary key's request, its signature checked
    // here, goes on as an anonymous one.
    delete ctx.req.headers.authorization;
  }
  return next();
}

const [directory, ...buckets] = process.argv.slice(2);
if (!directory || buckets.length === 0) {
  console.error('usage: node s3_server.mjs DIRECTORY BUCKET...');
  process.exit(2);
}
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  directory,
  silent: true,
  configureBuckets: buckets.map((name) => ({ name })),
});
server.middleware.unshift(verifySignature);
server.middleware.unshift(credentialServices);
// What the tests ask and set.
server.middleware.unshift(async (ctx, next) => {
  if (ctx.path === '/__counts') {
    ctx.body = JSON.stringify(counts);
    return undefined;
  }
  if (ctx.path === '/__config') {
    for (const name of Object.keys(config)) {
      if (ctx.query[name] !== undefined) config[name] = Number(ctx.query[name]);
    }
    ctx.body = JSON.stringify(config);
    return undefined;
  }
  return next();
});
const { port } = await server.run();
console.log(`port ${port}`);
