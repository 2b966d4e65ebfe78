// Package keystore keeps the principal key on disk in parley-keyd's state
// folder and loads it as a crypto.Signer.
//
// It guarantees that a key is never overwritten, that Load refuses a key
// file or state folder that anyone but the daemon's user could read or
// write (naming the command that fixes it), that an encrypted key (age,
// scrypt) is decrypted only in memory, and that the loaded key sits in
// locked memory that Close zeroes.
package keystore
