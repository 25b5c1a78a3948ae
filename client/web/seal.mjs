// A bid's sealed environment, made in the browser for the market page: the wallet never gives
// its key, the service never sees the text. The format and formulas are the sdk's
// (sdk/src/envelope.rs): `client/tests/seal.rs` has the sdk open what this seals and find the
// hash this computes, so the two cannot drift apart.
//
// Bundled by `node build.mjs` (esbuild, pinned in package-lock.json) into
// client/src/serve/web/seal.mjs, which `gpu-market serve` serves at /web/seal.mjs and the page
// imports when it first seals. Libraries: @noble/curves (ed25519 → X25519), @noble/ciphers (AES-256-GCM-SIV)
// and @noble/hashes (SHA-256): audited, dependency-free, and the ones Solana's web3.js uses.
import { ed25519, x25519 } from '@noble/curves/ed25519.js';
import { gcmsiv } from '@noble/ciphers/aes.js';
import { sha256 } from '@noble/hashes/sha2.js';

const text = (s) => new TextEncoder().encode(s);
// envelope::MAGIC, KDF_LABEL and SALT_LABEL.
const MAGIC = new Uint8Array([0x47, 0x4d, 0x45, 0x4e, 0x56, 0, 0, 1]);
const KDF_LABEL = text('gpu-market sealed env v1');
const SALT_LABEL = text('gpu-market env salt v2');

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** sha256 of `bytes`: what the salt's message names (`envelope::salt_text`). */
export const digest = (bytes) => sha256(bytes);

/**
 * The environment as the bid carries it (`envelope::Environment::new`): `signature` is the
 * wallet's signature of the salt's message; returns the salted bytes (what is sealed) and their
 * sha256 (the bid's `env_hash`).
 */
export function environment(plain, signature) {
  const salt = sha256(concat(SALT_LABEL, signature, plain));
  const salted = concat(salt, plain);
  return { salted, hash: sha256(salted) };
}

/**
 * `salted` encrypted to `recipient`, a machine's agent key (32 bytes of an ed25519 public key):
 * `envelope::seal`. Throws for a key that is not a point of the curve, or of small order.
 */
export function seal(salted, recipient) {
  const point = ed25519.Point.fromBytes(recipient);
  if (point.isSmallOrder()) throw new Error('the recipient is not an ed25519 public key');
  const secret = x25519.utils.randomSecretKey();
  const ephemeral = x25519.getPublicKey(secret);
  const shared = x25519.getSharedSecret(secret, ed25519.utils.toMontgomery(recipient));
  const key = sha256(concat(KDF_LABEL, shared, ephemeral, recipient));
  // Each key encrypts exactly one message, so the nonce may be fixed (zeros, as the sdk's).
  const sealed = gcmsiv(key, new Uint8Array(12)).encrypt(salted);
  return concat(MAGIC, ephemeral, sealed);
}
