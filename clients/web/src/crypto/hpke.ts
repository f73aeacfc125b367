/**
 * Report encryption, as shared/crypto/hpke.py and docs/protocol.md §3.2: HPKE (RFC 9180) base
 * mode, DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-128-GCM, single-shot, empty AAD, through
 * @hpke/core (WebCrypto). The `info` string binds protocol version, task and key id (and a
 * purpose: `tag`, `prio3-helper`), so a message sealed for one task, key or purpose opens as
 * no other.
 */
import { Aes128Gcm, CipherSuite, DhkemX25519HkdfSha256, HkdfSha256 } from "@hpke/core";
import { sha256 } from "@noble/hashes/sha2.js";

export const PROTOCOL_VERSION = "v1";
export const ENC_BYTES = 32;
export const TAG_BYTES = 16;

/** EncryptedReport on the wire: key id and URL-safe base64 (padded) `enc` and `ct`. */
export interface EncryptedReport {
  key_id: number;
  enc: string;
  ct: string;
}

const suite = new CipherSuite({
  kem: new DhkemX25519HkdfSha256(),
  kdf: new HkdfSha256(),
  aead: new Aes128Gcm(),
});

const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/** URL-safe base64 with padding (RFC 4648 §5), as the services' b64encode. */
export function b64encode(data: Uint8Array): string {
  let out = "";
  for (let i = 0; i < data.length; i += 3) {
    const n = (data[i]! << 16) | ((data[i + 1] ?? 0) << 8) | (data[i + 2] ?? 0);
    out += B64[(n >> 18) & 63]! + B64[(n >> 12) & 63]!;
    out += i + 1 < data.length ? B64[(n >> 6) & 63]! : "=";
    out += i + 2 < data.length ? B64[n & 63]! : "=";
  }
  return out;
}

/** Inverse of b64encode; accepts padded and unpadded URL-safe text, refuses anything else. */
export function b64decode(text: string): Uint8Array {
  const body = text.replace(/=+$/, "");
  if (!/^[A-Za-z0-9_-]*$/.test(body) || body.length % 4 === 1 || text.length - body.length > 2) {
    throw new RangeError("not URL-safe base64");
  }
  const out: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const ch of body) {
    acc = (acc << 6) | B64.indexOf(ch);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push((acc >> bits) & 0xff);
    }
  }
  return new Uint8Array(out);
}

/** The HPKE `info`: `privbandit/v1|task=<task>|key=<key id>`, then `|<purpose>` if any. */
export function hpkeInfo(task: string, keyId: number, purpose = ""): Uint8Array {
  const info = `privbandit/${PROTOCOL_VERSION}|task=${task}|key=${keyId}` + (purpose ? `|${purpose}` : "");
  if (!/^[\x20-\x7e]*$/.test(info)) throw new RangeError("task ids and purposes are ASCII");
  return new TextEncoder().encode(info);
}

/** The analyzer's key id: the first byte of SHA-256 over its raw X25519 public key (§3.1). A
 * client checks an HpkeConfig with it before sealing anything to the key. */
export function hpkeKeyId(publicKey: Uint8Array): number {
  return sha256(publicKey)[0]!;
}

// The analyzer's key as a WebCrypto key, imported once per key (a page seals every report to it).
const recipients = new Map<string, Promise<CryptoKey>>();

function recipientKey(publicKey: Uint8Array): Promise<CryptoKey> {
  const id = b64encode(publicKey);
  let key = recipients.get(id);
  if (key === undefined) {
    key = suite.kem.deserializePublicKey(publicKey);
    key.catch(() => recipients.delete(id));
    if (recipients.size >= 16) recipients.clear();
    recipients.set(id, key);
  }
  return key;
}

/** Seal `plaintext` to the analyzer's raw 32-byte X25519 public key for `task`. `testEphemeral`
 * (the input keying material of RFC 9180 DeriveKeyPair) fixes the ephemeral key: for the
 * protocol's test vectors only, never in use. */
export async function seal(
  publicKey: Uint8Array,
  keyId: number,
  task: string,
  plaintext: Uint8Array,
  purpose = "",
  testEphemeral?: Uint8Array,
): Promise<EncryptedReport> {
  if (publicKey.length !== 32) throw new RangeError(`an X25519 public key is 32 bytes, got ${publicKey.length}`);
  if (!(Number.isInteger(keyId) && keyId >= 0 && keyId <= 255)) throw new RangeError("key id in 0..255");
  const recipientPublicKey = await recipientKey(publicKey);
  const sender = await suite.createSenderContext({
    recipientPublicKey,
    info: hpkeInfo(task, keyId, purpose),
    ...(testEphemeral ? { ekm: testEphemeral } : {}),
  });
  const ct = new Uint8Array(await sender.seal(plaintext));
  return { key_id: keyId, enc: b64encode(new Uint8Array(sender.enc)), ct: b64encode(ct) };
}
