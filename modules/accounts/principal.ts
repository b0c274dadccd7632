/** Who is calling: every resource a request creates or reads is scoped to its project. */
export interface Principal {
  organizationId: string;
  projectId: string;
  /** Id of the API key used (never the key itself). */
  keyId: string;
  /** An organization key reaches every project of its organization (and the organization's usage). */
  scope?: "organization" | "project";
}
