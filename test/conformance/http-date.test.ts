// HTTP-date: Go net/http, CPython, RFC 9110, restated (sources/http-date.ts).
import { runSource } from './harness.js';
import { HTTP_DATE } from './sources/http-date.js';

runSource(HTTP_DATE);
