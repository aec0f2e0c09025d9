// Where idem-wasm's sender keeps a client: one record per intent and one small record of
// the ledger's settings and backoff state, so a change writes the records it touched and
// costs that intent's bytes whatever the queue holds. IndexedDB in browsers and service
// workers; memory for tests. A storage is `{ name?, load(), write(change) }`; senders of
// storages with the same name share them (one leads at a time).

const INTENTS = "intents";
const LEDGER = "ledger";
const STATE = "state";
const LEGACY = "snapshots";
const VERSION = 2;

/**
 * A storage in IndexedDB: database `database`, one record per intent (store "intents", by
 * key) and the ledger's state (store "ledger"). Writes use strict durability: done means on
 * disk. A database written by version 0.1 (one snapshot in store "snapshots", entry `key`)
 * is upgraded on open.
 */
export function indexedDbStorage({ database = "idem", key = "client" } = {}) {
  let opened;
  const open = () =>
    (opened ??= new Promise((resolve, reject) => {
      const request = indexedDB.open(database, VERSION);
      request.onupgradeneeded = (event) => upgrade(request.result, request.transaction, event.oldVersion, key);
      request.onsuccess = () => {
        const db = request.result;
        // A later version of this code upgrading the database: let it.
        db.onversionchange = () => {
          db.close();
          opened = undefined;
        };
        resolve(db);
      };
      request.onerror = () => {
        opened = undefined;
        reject(request.error);
      };
      request.onblocked = () => {
        opened = undefined;
        reject(new Error(`indexedDB ${database}: an older version of this page holds it open; close its other tabs`));
      };
    }));
  const run = async (mode, work) => {
    const db = await open();
    return new Promise((resolve, reject) => {
      const tx = db.transaction([INTENTS, LEDGER], mode, { durability: "strict" });
      const result = work(tx);
      tx.oncomplete = () => resolve(result());
      tx.onerror = tx.onabort = () => reject(tx.error ?? new Error(`indexedDB ${database}: transaction aborted`));
    });
  };
  return {
    name: `idem:${database}`,
    load: () =>
      run("readonly", (tx) => {
        const state = tx.objectStore(LEDGER).get(STATE);
        const intents = tx.objectStore(INTENTS).getAll();
        return () =>
          state.result === undefined && intents.result.length === 0
            ? undefined
            : { state: bytes(state.result), intents: intents.result.map(bytes) };
      }),
    write: (change) =>
      run("readwrite", (tx) => {
        const intents = tx.objectStore(INTENTS);
        for (const [k, value] of change.add ?? []) intents.add(value, k);
        for (const [k, value] of change.put ?? []) intents.put(value, k);
        for (const k of change.delete ?? []) intents.delete(k);
        if (change.state !== undefined) tx.objectStore(LEDGER).put(change.state, STATE);
        return () => undefined;
      }),
    close() {
      opened?.then((db) => db.close(), () => {});
      opened = undefined;
    },
  };
}

/** Version 1 kept one snapshot per entry of store "snapshots"; version 2 one record per intent. */
function upgrade(db, tx, oldVersion, key) {
  db.createObjectStore(INTENTS);
  db.createObjectStore(LEDGER);
  if (oldVersion < 1) return;
  // The whole snapshot becomes the state record: the sender that leads next reads its
  // intents and writes each one as a record of its own, with the state alone, in one
  // transaction.
  const legacy = tx.objectStore(LEGACY);
  const read = legacy.get(key);
  read.onsuccess = () => {
    if (read.result !== undefined) tx.objectStore(LEDGER).put(bytes(read.result), STATE);
    legacy.delete(key);
    const rest = legacy.count();
    rest.onsuccess = () => {
      if (rest.result === 0) db.deleteObjectStore(LEGACY);
    };
  };
}

/** A stored value as a Uint8Array (IndexedDB gives back what was put: a Uint8Array). */
function bytes(value) {
  if (value === undefined || value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  return new Uint8Array(value);
}

/** A storage in memory: for tests, and for pages that accept losing intents on reload. */
export function memoryStorage() {
  let state;
  const intents = new Map();
  return {
    load: async () =>
      state === undefined && intents.size === 0
        ? undefined
        : { state: state?.slice(), intents: [...intents.values()].map((b) => b.slice()) },
    write: async (change) => {
      for (const [k] of change.add ?? []) {
        if (intents.has(k)) throw new Error(`key ${k}: a record with this key exists`);
      }
      for (const [k, value] of [...(change.add ?? []), ...(change.put ?? [])]) intents.set(k, value.slice());
      for (const k of change.delete ?? []) intents.delete(k);
      if (change.state !== undefined) state = change.state.slice();
    },
  };
}
