// A few promise helpers over IndexedDB (the browser's transactional store): the device's
// outbox, per-person counts and counters live in one database, so a feedback's report, its
// person's count and the counters commit in one transaction (all or nothing, across a reload or
// a closed tab: IndexedDB commits a transaction durably or not at all).

export const DB_VERSION = 1;

/** The object stores; `outbox` and `dead` are keyed by an auto-increment `seq` (upload order). */
export const STORES = {
  outbox: "outbox",
  dead: "dead",
  persons: "persons",
  meta: "meta",
} as const;

export function openDatabase(name: string): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(name, DB_VERSION);
    req.onupgradeneeded = () => {
      const db = req.result;
      if (!db.objectStoreNames.contains(STORES.outbox)) {
        db.createObjectStore(STORES.outbox, { keyPath: "seq", autoIncrement: true });
      }
      if (!db.objectStoreNames.contains(STORES.dead)) {
        db.createObjectStore(STORES.dead, { keyPath: "seq" });
      }
      if (!db.objectStoreNames.contains(STORES.persons)) {
        db.createObjectStore(STORES.persons, { keyPath: "slot" });
      }
      if (!db.objectStoreNames.contains(STORES.meta)) db.createObjectStore(STORES.meta);
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
    req.onblocked = () => reject(new Error(`IndexedDB ${name} is blocked by another tab's upgrade`));
  });
}

/** A request's result as a promise. */
export function done<T>(req: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

/** Run `body` in one transaction over `stores`; resolves with its value once the transaction
 * has committed (not merely when its requests succeeded), rejects if it aborted. */
export function transact<T>(
  db: IDBDatabase, stores: string[], mode: IDBTransactionMode,
  body: (tx: IDBTransaction) => Promise<T>,
): Promise<T> {
  // "strict" durability: the commit is flushed before `complete` fires (Chromium otherwise
  // reports completion before the data reached the disk).
  const tx = db.transaction(stores, mode, { durability: "strict" });
  const committed = new Promise<void>((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onabort = () => reject(tx.error ?? new Error("transaction aborted"));
    tx.onerror = () => reject(tx.error ?? new Error("transaction failed"));
  });
  const result = body(tx).catch((err) => {
    try { tx.abort(); } catch { /* already finished */ }
    throw err;
  });
  return Promise.all([result, committed]).then(([value]) => value);
}
