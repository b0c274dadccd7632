import { credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import { AdminServiceClient, AdminServiceService } from "../../proto/gen/tributary/v1/admin.js";

// The admin gRPC service (proto/tributary/v1/admin.proto) as promises: one method per RPC, each
// call carrying the admin token and a deadline. `tributary admin` and the tests use it alike.

type Rpcs = typeof AdminServiceService;
type RequestOf<K extends keyof Rpcs> = Parameters<Rpcs[K]["requestSerialize"]>[0];
type ResponseOf<K extends keyof Rpcs> = ReturnType<Rpcs[K]["responseDeserialize"]>;

export type AdminApi = { [K in keyof Rpcs]: (request: RequestOf<K>) => Promise<ResponseOf<K>> } & {
  /** Closes the channel (calls in flight fail). */
  close(): void;
};

/** A failed admin call: gRPC's status code (3 INVALID_ARGUMENT, 5 NOT_FOUND, ...) and its message. */
export const isAdminCallError = (err: unknown): err is ServiceError => typeof (err as ServiceError | undefined)?.code === "number";

const STATUS_NAMES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"];

/** gRPC's name for a status code ("NOT_FOUND"). */
export const adminStatusName = (code: number): string => STATUS_NAMES[code] ?? `code ${code}`;

/** A client of the admin service at `addr` (host:port) with `token`; each call fails after `deadlineMs`. */
export function adminClient(addr: string, token: string, deadlineMs = 15_000): AdminApi {
  const client = new AdminServiceClient(addr, credentials.createInsecure());
  const metadata = new Metadata();
  metadata.set("authorization", `Bearer ${token}`);
  const api: Record<string, unknown> = { close: () => client.close() };
  for (const name of Object.keys(AdminServiceService)) {
    const method = (client as unknown as Record<string, Function>)[name]!;
    api[name] = (request: unknown) =>
      new Promise((resolve, reject) =>
        method.call(client, request, metadata, { deadline: new Date(Date.now() + deadlineMs) }, (err: ServiceError | null, response: unknown) =>
          err ? reject(err) : resolve(response),
        ),
      );
  }
  return api as AdminApi;
}
