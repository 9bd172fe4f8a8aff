/**
 * Splits a byte stream into lines without ever holding more than one line (plus one
 * chunk) in memory. Unlike `readline`, a line longer than `maxLineBytes` is not
 * accumulated: its bytes are dropped as they arrive and the line is handed on as
 * "too long", so a log without newlines cannot exhaust memory.
 *
 * Lines end at `\n`; a `\r` before it is removed, and so is a UTF-8 byte order mark at
 * the very start. Bytes are decoded as UTF-8 one whole line at a time (a `\n` byte
 * never occurs inside a multi-byte character, so no character is split).
 */
export class LineSplitter {
  /** Bytes of the unfinished line (only while it fits in maxLineBytes). */
  private parts: Buffer[] = [];
  private partBytes = 0;
  /** The unfinished line has grown past the limit: its bytes are being dropped. */
  private overflow = false;
  private lineNo = 0;

  /**
   * @param onLine called once per line with its text (or null when it was longer than
   *   the limit) and its 1-based number.
   */
  constructor(
    private readonly onLine: (text: string | null, lineNo: number) => void,
    private readonly maxLineBytes = 1024 * 1024,
  ) {}

  /** Feeds a chunk (a Buffer, or a string, which is encoded as UTF-8). */
  push(chunk: Buffer | Uint8Array | string): void {
    const buf =
      typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let start = 0;
    for (;;) {
      const nl = buf.indexOf(10, start);
      if (nl < 0) break;
      this.emit(buf, start, nl);
      start = nl + 1;
    }
    if (start < buf.length) this.keep(buf, start, buf.length);
  }

  /** Ends the input: a last line without a trailing newline still counts. */
  end(): void {
    if (this.partBytes > 0 || this.overflow) this.emit(Buffer.alloc(0), 0, 0);
  }

  /** Lines seen so far. */
  get lines(): number {
    return this.lineNo;
  }

  private keep(buf: Buffer, s: number, e: number): void {
    if (this.overflow) return;
    if (this.partBytes + (e - s) > this.maxLineBytes) {
      this.overflow = true;
      this.parts = [];
      this.partBytes = 0;
      return;
    }
    // Copy: the caller may reuse its chunk.
    this.parts.push(Buffer.from(buf.subarray(s, e)));
    this.partBytes += e - s;
  }

  private emit(buf: Buffer, s: number, e: number): void {
    this.lineNo++;
    if (this.overflow || this.partBytes + (e - s) > this.maxLineBytes) {
      this.overflow = false;
      this.parts = [];
      this.partBytes = 0;
      this.onLine(null, this.lineNo);
      return;
    }
    let text: string;
    if (this.partBytes === 0) {
      if (e > s && buf[e - 1] === 13) e--;
      text = buf.toString('utf8', s, e);
    } else {
      this.parts.push(buf.subarray(s, e));
      const whole = Buffer.concat(this.parts);
      this.parts = [];
      this.partBytes = 0;
      const end = whole.length > 0 && whole[whole.length - 1] === 13 ? whole.length - 1 : whole.length;
      text = whole.toString('utf8', 0, end);
    }
    if (this.lineNo === 1 && text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    this.onLine(text, this.lineNo);
  }
}
