// gRPC: A6, grpc-java, grpc-go, gRPC core, restated (sources/grpc.ts).
import { runSource } from './harness.js';
import { GRPC } from './sources/grpc.js';

runSource(GRPC);
