// An S3-compatible server on loopback for the S3 source's tests: s3rver (npm) stores the
// objects and answers S3's API; in front of it, every signed request's AWS Signature V4 is
// computed again with AWS's own signer (@smithy/signature-v4, what the AWS SDK for JavaScript
// signs with) and refused as S3 refuses it when it differs, because s3rver checks only the
// access key of a V4 request.
//
// Usage: node s3_server.mjs DIRECTORY BUCKET...   Prints "port N" once it listens.
// Credentials: access key S3RVER, secret S3RVER (s3rver's own account).
import S3rver from 's3rver';
import { SignatureV4 } from '@smithy/signature-v4';
import { Hash } from '@smithy/hash-node';

const secrets = new Map([['S3RVER', 'S3RVER']]);
const counts = { signed: 0, refused: 0 };

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
// How many requests passed the signature check and how many were refused, for the tests.
server.middleware.unshift(async (ctx, next) => {
  if (ctx.path === '/__counts') {
    ctx.body = JSON.stringify(counts);
    return undefined;
  }
  return next();
});
const { port } = await server.run();
console.log(`port ${port}`);
