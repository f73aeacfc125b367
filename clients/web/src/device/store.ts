// The device's durable state in IndexedDB (services/device/store.py's role in the browser):
//
// - the outbox: sealed reports waiting for the shuffler's 202, oldest first. A report is
//   written before it is sent and deleted only after the shuffler made it durable, so a reload
//   or a closed tab at any moment loses nothing; what is re-sent is the stored JSON, byte for
//   byte, which the shuffler answers as a duplicate (§5.1 exact bytes, §5.5 the nonce), so
//   nothing is counted twice;
// - the per-person counts of the tasks that bound each person's reports (§6.3, issue 24): the
//   count, the report and the counters commit in one transaction, so neither two tabs nor a
//   crash let a report beyond the bound leave;
// - counters (feedbacks queued, withheld, uploaded, dead-lettered) for the reconciliation;
// - reports the shuffler refused for good (400/413/422 on the report alone): kept, not retried.

import { done, openDatabase, STORES, transact } from "./idb.js";

export interface OutboxItem {
  seq: number;
  task: string;
  transport: string;
  json: string;
  created: number;
}

export interface Counters {
  feedbacks: number;
  withheld: number;
  uploaded: number;
  deadLettered: number;
}

const ZERO: Counters = { feedbacks: 0, withheld: 0, uploaded: 0, deadLettered: 0 };

/** A person's slot in a bounded task's period: HMAC(person key, task ‖ 0x00 ‖ user) and the
 * period's index, so the user key itself is never stored (services/device/persons.py). */
export interface PersonSlot {
  slot: string;
  k: number;
}

/** What a feedback commits with its report: the application's own marker (e.g. a page's
 * progress), written in the same transaction, so a reload finds both or neither. */
export interface Marker {
  key: string;
  value: unknown;
}

export class DeviceStore {
  private constructor(readonly db: IDBDatabase) {}

  static async open(name = "privbandit-device"): Promise<DeviceStore> {
    return new DeviceStore(await openDatabase(name));
  }

  close(): void {
    this.db.close();
  }

  /** Queue `item` (unless the person's bound is reached) and count it, in one transaction:
   * the new item's seq, or null when the feedback was withheld (no report made). */
  queue(
    item: Omit<OutboxItem, "seq">, slot: PersonSlot | null, marker: Marker | null = null,
  ): Promise<number | null> {
    const stores = [STORES.outbox, STORES.persons, STORES.meta];
    return transact(this.db, stores, "readwrite", async (tx) => {
      const meta = tx.objectStore(STORES.meta);
      const counters = await this.countersIn(meta, item.task);
      let seq: number | null = null;
      let admitted = true;
      if (slot !== null) {
        const persons = tx.objectStore(STORES.persons);
        const row = (await done(persons.get(slot.slot))) as { count: number } | undefined;
        const count = row?.count ?? 0;
        admitted = count < slot.k;
        if (admitted) await done(persons.put({ slot: slot.slot, count: count + 1 }));
      }
      if (admitted) {
        seq = (await done(tx.objectStore(STORES.outbox).add(item))) as number;
        counters.feedbacks += 1;
      } else {
        counters.withheld += 1;
      }
      await done(meta.put(counters, `counters:${item.task}`));
      if (marker !== null) await done(meta.put(marker.value, marker.key));
      return seq;
    });
  }

  /** Up to `limit` items of the oldest (task, transport) group not in `exclude`. */
  head(limit: number, exclude: Set<string> = new Set()): Promise<OutboxItem[]> {
    return transact(this.db, [STORES.outbox], "readonly", (tx) => new Promise((resolve, reject) => {
      const out: OutboxItem[] = [];
      let group: string | null = null;
      const req = tx.objectStore(STORES.outbox).openCursor();
      req.onerror = () => reject(req.error);
      req.onsuccess = () => {
        const cursor = req.result;
        if (cursor === null) return resolve(out);
        const item = cursor.value as OutboxItem;
        const g = groupOf(item);
        if (group === null && !exclude.has(g)) group = g;
        if (g === group) out.push(item);
        if (out.length >= limit) return resolve(out);
        cursor.continue();
      };
    }));
  }

  /** The shuffler answered 202 for these items of `task`: delete and count them, in one
   * transaction. */
  uploaded(task: string, seqs: number[]): Promise<void> {
    return transact(this.db, [STORES.outbox, STORES.meta], "readwrite", async (tx) => {
      const outbox = tx.objectStore(STORES.outbox);
      let gone = 0;
      for (const seq of seqs) {
        // Another tab may have uploaded it meanwhile: count each deletion once.
        if ((await done(outbox.count(seq))) > 0) {
          await done(outbox.delete(seq));
          gone += 1;
        }
      }
      const meta = tx.objectStore(STORES.meta);
      const counters = await this.countersIn(meta, task);
      counters.uploaded += gone;
      await done(meta.put(counters, `counters:${task}`));
    });
  }

  /** Refused for good by the shuffler: move out of the outbox, keep with the reason. */
  deadLetter(task: string, items: OutboxItem[], reason: string): Promise<void> {
    const stores = [STORES.outbox, STORES.dead, STORES.meta];
    return transact(this.db, stores, "readwrite", async (tx) => {
      for (const item of items) {
        await done(tx.objectStore(STORES.outbox).delete(item.seq));
        await done(tx.objectStore(STORES.dead).put({ ...item, reason }));
      }
      const meta = tx.objectStore(STORES.meta);
      const counters = await this.countersIn(meta, task);
      counters.deadLettered += items.length;
      await done(meta.put(counters, `counters:${task}`));
    });
  }

  pending(): Promise<number> {
    return transact(this.db, [STORES.outbox], "readonly",
      (tx) => done(tx.objectStore(STORES.outbox).count()));
  }

  /** The task's counters (feedbacks queued, withheld, uploaded, dead-lettered). */
  counters(task: string): Promise<Counters> {
    return transact(this.db, [STORES.meta], "readonly",
      (tx) => this.countersIn(tx.objectStore(STORES.meta), task));
  }

  getMeta<T>(key: string): Promise<T | undefined> {
    return transact(this.db, [STORES.meta], "readonly",
      (tx) => done(tx.objectStore(STORES.meta).get(key)) as Promise<T | undefined>);
  }

  putMeta(key: string, value: unknown): Promise<void> {
    return transact(this.db, [STORES.meta], "readwrite", async (tx) => {
      await done(tx.objectStore(STORES.meta).put(value, key));
    });
  }

  /** The store's own HMAC key for person slots: made once (non-extractable, from the
   * browser's CSPRNG), kept in IndexedDB as a CryptoKey (its bytes never reach script). */
  async personKey(): Promise<CryptoKey> {
    const have = await this.getMeta<CryptoKey>("person-key");
    if (have !== undefined) return have;
    const key = await crypto.subtle.generateKey(
      { name: "HMAC", hash: "SHA-256", length: 256 }, false, ["sign"]);
    // Two tabs may race here: `add` keeps the first key, and both then read it back.
    await transact(this.db, [STORES.meta], "readwrite", async (tx) => {
      const meta = tx.objectStore(STORES.meta);
      if ((await done(meta.count("person-key"))) === 0) await done(meta.add(key, "person-key"));
    });
    return (await this.getMeta<CryptoKey>("person-key"))!;
  }

  private async countersIn(meta: IDBObjectStore, task: string): Promise<Counters> {
    const got = (await done(meta.get(`counters:${task}`))) as Counters | undefined;
    return { ...ZERO, ...(got ?? {}) };
  }
}

export function groupOf(item: { task: string; transport: string }): string {
  return `${item.task}\u0000${item.transport}`;
}
