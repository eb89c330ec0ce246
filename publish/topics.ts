/**
 * The topics of one site (docs/publish.md, "Topics"), all under `<prefix>/<site_id>/`: each
 * type's state and availability, the safety verdict per profile, the publisher's status.
 *
 * @module
 */

import { topicLevel } from "./names.ts";

/** The safety profile of the site's own verdict (docs/safety.md#profiles). */
export const SITE_PROFILE = "site";

/**
 * The topics of one site.
 *
 * @example Usage
 * ```ts
 * import { SiteTopics } from "./topics.ts";
 * import assert from "node:assert/strict";
 *
 * const topics = new SiteTopics("obs", "0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a");
 * assert.equal(topics.state("roof/north"), "obs/0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a/state/roof%2Fnorth");
 * assert.equal(topics.safety("site"), "obs/0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a/safety");
 * assert.equal(topics.safety("north"), "obs/0b6f9c1e-7a54-4d0e-9a51-3f1c8f1b2d3a/safety/north");
 * ```
 */
export class SiteTopics {
  /** `<prefix>/<site_id>`. */
  readonly root: string;
  /** The site's id. */
  readonly siteId: string;

  /**
   * Names the topics of a site.
   *
   * @param prefix The checked `--prefix`.
   * @param siteId The site's id (`GET /ready`).
   */
  constructor(prefix: string, siteId: string) {
    this.siteId = siteId;
    this.root = `${prefix}/${topicLevel(siteId)}`;
  }

  /** `<root>/status`: `online`, and `offline` as the last will. */
  get status(): string {
    return `${this.root}/status`;
  }

  /**
   * The latest event envelope of a type.
   *
   * @param type The event type.
   * @returns `<root>/state/<type as a topic level>`.
   */
  state(type: string): string {
    return `${this.root}/state/${topicLevel(type)}`;
  }

  /**
   * `online` or `offline` for a type.
   *
   * @param type The event type.
   * @returns `<root>/availability/<type as a topic level>`.
   */
  availability(type: string): string {
    return `${this.root}/availability/${topicLevel(type)}`;
  }

  /**
   * A profile's verdict.
   *
   * @param profile `site`, or a profile name (letters, digits, `_`, `-`).
   * @returns `<root>/safety` for the site, `<root>/safety/<profile>` for another.
   */
  safety(profile: string): string {
    return profile === SITE_PROFILE
      ? `${this.root}/safety`
      : `${this.root}/safety/${topicLevel(profile)}`;
  }
}
