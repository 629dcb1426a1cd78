/** The API's JSON shapes the dashboard reads (camelCase, as `kiban.api.schemas` writes them). */

/** A token's role (`kiban.domain.roles.Role`); the dashboard never signs in a job's. */
export type Role = "admin" | "tenant-admin" | "member" | "viewer" | "job";

export interface WhoAmI {
  name: string;
  tenant: string | null;
  isAdmin: boolean;
  role: Role;
  member?: string | null;
}

/** A token as `GET /api/v1/tokens` lists it: never its secret. */
export interface TokenInfo {
  id: number;
  tenant: string | null;
  member: string;
  role: Role;
  createdAt: number;
  createdBy: string | null;
  expiresAt: number | null;
  lastUsedAt: number | null;
  revokedAt: number | null;
  revokedBy: string | null;
}

export interface Reason {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

export interface Replica {
  task: string;
  index: number;
  rank: number;
  node: string;
  gpuIds: number[];
  state: string;
  pid: number | null;
  exitCode: number | null;
  startedAt: number | null;
  finishedAt: number | null;
  waiting?: string | null;
}

export interface Job {
  id: string;
  name: string;
  tenant: string;
  queue: string;
  state: string;
  priority: number;
  attempt: number;
  submittedAt: number;
  submittedBy?: string | null;
  admittedAt: number | null;
  startedAt: number | null;
  finishedAt: number | null;
  reason: Reason | null;
  queuePosition: number | null;
  clusterPosition?: number | null;
  eta?: number | null;
  message: string | null;
  gpus: number;
  replicaCount: number;
  spec?: Record<string, unknown> | null;
  replicas?: Replica[] | null;
  lastCheckpointAt?: number | null;
  preemptedBy?: string | null;
}

export interface JobEvent {
  id: number;
  type: "Normal" | "Warning";
  reason: string;
  message: string;
  at: number;
}

export const JOB_STATES = ["Pending", "Admitted", "Running", "Stopping", "Succeeded", "Failed", "Cancelled"];
export const TERMINAL_STATES = new Set(["Succeeded", "Failed", "Cancelled"]);

export interface Overview {
  at: number;
  flavors: { flavor: string; total: number; free: number; used: number; borrowed: number; unhealthy: number }[];
  queues: {
    name: string;
    tenant: string;
    flavors: Record<string, { nominal: number | null; used: number; borrowed: number }>;
  }[];
  pendingByReason: { reason: string; count: number }[];
  tenants: { name: string; standing: number; usageGpuHours: number }[];
}

export interface Condition {
  type: string;
  status: string;
  reason: string;
}

export interface Node {
  name: string;
  gpus: number;
  gpusInUse: number;
  cpuMillis: number;
  memory: number;
  labels: Record<string, string>;
  healthy: boolean;
  healthMessage: string;
  cordoned: boolean;
  cordonSource?: string;
  conditions: Condition[];
}

export interface Queue {
  name: string;
  tenant: string;
}

export interface Revision {
  name: string;
  number: number;
  state: string;
  message: string;
  role: "stable" | "canary" | "";
  trafficPercent: number;
  desiredReplicas: number;
  readyReplicas: number;
  createdAt: number;
  readyAt: number | null;
}

export interface ServiceReplica {
  job: string;
  revision: string;
  state: string;
  node: string | null;
  ready: boolean;
  reason: string | null;
}

export interface Service {
  name: string;
  tenant: string;
  state: string;
  url: string | null;
  queue: string;
  runtime: string;
  model: string;
  task: "auto" | "text_generation" | "text_embedding";
  minReplicas: number;
  maxReplicas: number;
  traffic: Record<string, number>;
  revisions: Revision[];
  replicas: ServiceReplica[];
  stats?: { requests: number; rps: number; inFlight: number; queued: number; p50Ms: number | null; p99Ms: number | null } | null;
}

export interface UsageHistory {
  step: number;
  tenants: { tenant: string; points: { at: number; gpuHours: number; decayedGpuHours: number }[] }[];
}

export interface Notebook {
  name: string;
  tenant: string;
  owner: string;
  state: "Starting" | "Running" | "Stopped" | "Failed";
  url: string;
  jobId: string | null;
  gpus: number;
  queue: string;
  /** Seconds (the API's answer; "1h" and the like are accepted when starting one). */
  idleTimeout: number | string | null;
  maxLifetime: number | string | null;
  lastActivity: number | null;
  reason: string | null;
}
