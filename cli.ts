/**
 * Placeholder until its issue lands.
 * @module
 */
export {};
