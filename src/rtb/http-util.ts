// Small node:http helpers shared by the exchange and the bidder.
import type http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A text/plain answer with its length. */
export function plain(res: http.ServerResponse, status: number, text: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

/** A value fit for a response header: printable ASCII only, at most 200 characters. */
export function headerSafe(s: string): string {
  return s.replace(/[^\x20-\x7e]/g, '?').slice(0, 200);
}

/**
 * Starts `server` listening; resolves with its address, rejects with the listen error
 * (EADDRINUSE…). `exclusive`: never share the port with other cluster workers.
 */
export function listenOn(server: http.Server, port: number, host: string, exclusive = false): Promise<AddressInfo> {
  return new Promise<AddressInfo>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port, host, exclusive }, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}
