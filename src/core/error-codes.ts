import type { ErrorClass } from './types.js';

/** Every error class, with whether request bytes may have left the machine. */
export const ERROR_CLASSES: Readonly<Record<ErrorClass, { readonly sent: 'not_sent' | 'unknown'; readonly meaning: string }>> = Object.freeze({
  connect_refused: { sent: 'not_sent', meaning: 'connection refused: nothing listens, nothing was sent' },
  dns: { sent: 'not_sent', meaning: 'the host name did not resolve, nothing was sent' },
  connect_timeout: { sent: 'not_sent', meaning: 'the TCP connection did not open in time, nothing was sent' },
  tls: { sent: 'not_sent', meaning: 'the TLS handshake failed, nothing was sent' },
  timeout: { sent: 'unknown', meaning: 'no complete answer within the attempt time; the server may have acted' },
  reset: { sent: 'unknown', meaning: 'the connection was reset; the server may have acted' },
  socket_closed: { sent: 'unknown', meaning: 'the connection closed before a complete answer; the server may have acted' },
  protocol: { sent: 'unknown', meaning: 'the answer was not valid HTTP; the server may have acted' },
  aborted: { sent: 'unknown', meaning: 'the caller cancelled the operation' },
  error: { sent: 'unknown', meaning: 'the operation threw an error relent cannot classify' },
});

/**
 * Node, undici and OpenSSL error codes → error class. The one table every driver uses
 * to turn a thrown error into an observation. (The HTTP driver adds what only it
 * knows: whether request bytes were written before the failure.)
 */
export const ERROR_CODE_CLASSES: Readonly<Record<string, ErrorClass>> = Object.freeze({
  ECONNREFUSED: 'connect_refused',
  ENOTFOUND: 'dns',
  EAI_AGAIN: 'dns',
  EAI_NONAME: 'dns',
  EAI_FAIL: 'dns',
  ENODATA: 'dns',
  ESERVFAIL: 'dns',
  UND_ERR_CONNECT_TIMEOUT: 'connect_timeout',
  ETIMEDOUT: 'connect_timeout',
  ECONNRESET: 'reset',
  EPIPE: 'reset',
  ECONNABORTED: 'reset',
  UND_ERR_SOCKET: 'socket_closed',
  UND_ERR_CLOSED: 'socket_closed',
  UND_ERR_HEADERS_TIMEOUT: 'timeout',
  UND_ERR_BODY_TIMEOUT: 'timeout',
  UND_ERR_RES_CONTENT_LENGTH_MISMATCH: 'protocol',
  HPE_INVALID_CONSTANT: 'protocol',
  HPE_INVALID_STATUS: 'protocol',
  HPE_INVALID_HEADER_TOKEN: 'protocol',
  HPE_UNEXPECTED_CONTENT_LENGTH: 'protocol',
  UND_ERR_INFO: 'protocol',
  ERR_TLS_CERT_ALTNAME_INVALID: 'tls',
  ERR_SSL_WRONG_VERSION_NUMBER: 'tls',
  EPROTO: 'tls',
  CERT_HAS_EXPIRED: 'tls',
  CERT_NOT_YET_VALID: 'tls',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'tls',
  SELF_SIGNED_CERT_IN_CHAIN: 'tls',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'tls',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'tls',
  ERR_SSL_TLSV1_ALERT_UNKNOWN_CA: 'tls',
  ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE: 'tls',
  // Added for the HTTP driver (src/core/wire.ts). No route or no local address: the
  // connection never opened, so nothing was sent (the nearest class is connect_refused).
  ENETUNREACH: 'connect_refused',
  EHOSTUNREACH: 'connect_refused',
  ENETDOWN: 'connect_refused',
  EHOSTDOWN: 'connect_refused',
  EADDRNOTAVAIL: 'connect_refused',
  UND_ERR_HEADERS_OVERFLOW: 'protocol',
  UND_ERR_RES_EXCEEDED_MAX_SIZE: 'protocol',
  HPE_INVALID_CHUNK_SIZE: 'protocol',
  HPE_HEADER_OVERFLOW: 'protocol',
  HPE_INVALID_TRANSFER_ENCODING: 'protocol',
  HPE_CLOSED_CONNECTION: 'socket_closed',
  CERT_UNTRUSTED: 'tls',
  CERT_SIGNATURE_FAILURE: 'tls',
  CERT_REVOKED: 'tls',
  CERT_REJECTED: 'tls',
  HOSTNAME_MISMATCH: 'tls',
  UNABLE_TO_GET_ISSUER_CERT: 'tls',
  ERR_TLS_HANDSHAKE_TIMEOUT: 'tls',
});

/**
 * Failures that carry no code, known by their message: Deno's own `fetch` rejects with a
 * TypeError "fetch failed" whose cause says only, in its message, what went wrong (seen
 * with Deno 2.9.6: "error sending request for url (…): client error (Connect): tcp
 * connect error: Connection refused (os error 111)", "…: dns error: failed to lookup
 * address information: Name or service not known"). Read only when no code matched.
 */
export const ERROR_MESSAGE_CLASSES: ReadonlyArray<readonly [RegExp, ErrorClass]> = Object.freeze([
  [/\btcp connect error: Connection refused\b/, 'connect_refused'],
  [/\bclient error \(Connect\): dns error\b/, 'dns'],
] as const);

/**
 * The class of an error by its `code`, looking through `cause` chains (fetch wraps
 * errors); failing that, by a message of ERROR_MESSAGE_CLASSES along the same chain.
 */
export function errorClassOfCode(error: unknown): ErrorClass | null {
  let e: unknown = error;
  for (let depth = 0; depth < 5 && typeof e === 'object' && e !== null; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') {
      const cls = ERROR_CODE_CLASSES[code];
      if (cls) return cls;
      if (code.startsWith('ERR_SSL_') || code.startsWith('ERR_TLS_')) return 'tls';
      if (code.startsWith('HPE_')) return 'protocol'; // llhttp parse errors (added for the HTTP driver)
    }
    e = (e as { cause?: unknown }).cause;
  }
  return errorClassOfMessage(error);
}

function errorClassOfMessage(error: unknown): ErrorClass | null {
  let e: unknown = error;
  for (let depth = 0; depth < 5 && typeof e === 'object' && e !== null; depth++) {
    const message = (e as { message?: unknown }).message;
    if (typeof message === 'string') for (const [re, cls] of ERROR_MESSAGE_CLASSES) if (re.test(message)) return cls;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}
