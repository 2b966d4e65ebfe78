package grant

import (
	"crypto/ed25519"
	"crypto/sha256"
	"sync"
	"sync/atomic"
)

// defaultBlockCacheSize is the number of verified blocks a BlockCache holds:
// at about 100 bytes an entry, 400 KiB.
const defaultBlockCacheSize = 4096

// blockCacheShards splits a BlockCache so that services verifying on many
// cores do not all wait on one lock.
const blockCacheShards = 16

// BlockCache remembers block signatures that Verify has checked, so that a
// service that sees the same grant on every request of an agent pays the
// Ed25519 verification of each block once, not on every call. It is
// optional (Context.Cache; nil means none), safe for concurrent use, and
// may be shared by any number of verifiers, whatever keys each trusts. The
// zero value is an empty cache, ready for use; it must not be copied once
// used.
//
// # What a hit means
//
// An entry records exactly one fact: ed25519.Verify(key, msg, sig) returned
// true, for the signer's key, the exact signed payload bytes and the
// signature of one block. Ed25519 verification is a pure function of those
// three, so the fact holds in any later call, for any chain and any verifier.
// The entry is keyed by SHA-256 over all three (a fixed domain string, the
// 32-byte key, the 64-byte signature, then the payload bytes; the first two
// have fixed lengths, so no two triples have the same input). A hit for a
// triple that was never verified needs a SHA-256 collision, which is out of
// reach (about 2^128 work).
//
// Keying by the block id alone would be a hole: the id hashes only the
// signature's text (§6.2), so a verified signature re-attached to a widened
// payload (a caveat removed, an expiry pushed out) keeps its id. With the key
// and the payload in the cache key, that block misses and its signature is
// checked, and fails.
//
// Only signatures are remembered. Verify still decodes every token, checks
// the issuer's trust, the holder's match with the proof key, every prev link
// and every caveat (exp and nbf against Context.Now included) on every call.
// Failures are never cached.
//
// # Bound and eviction
//
// A BlockCache holds at most 4096 blocks (about 400 KiB). When a shard is
// full, a new entry replaces one chosen by the CLOCK rule: entries hit since
// the hand last passed them get a second chance, the first one not hit is
// replaced. A holder of any valid grant can make any number of distinct valid
// blocks (it signs its own delegations), so a flood of them is expected:
// it stays within the bound, and since a flood's entries are each used once,
// entries that are hit between two passes of the hand survive it. What a
// flood can do is cost other agents one Ed25519 verification per block
// again, which is the price without a cache.
type BlockCache struct {
	once   sync.Once
	shards []blockCacheShard
}

type blockCacheKey [sha256.Size]byte

type blockCacheShard struct {
	mu    sync.RWMutex
	index map[blockCacheKey]int
	slots []blockCacheSlot
	hand  int
}

type blockCacheSlot struct {
	key  blockCacheKey
	used bool
	// ref is set by lookups, which hold only the read lock.
	ref atomic.Bool
}

// newBlockCache returns a cache of at most size verified blocks; size < 1
// means defaultBlockCacheSize.
func newBlockCache(size int) *BlockCache {
	c := &BlockCache{}
	c.once.Do(func() { c.makeShards(size) })
	return c
}

// makeShards gives c room for size blocks; size < 1 means
// defaultBlockCacheSize.
func (c *BlockCache) makeShards(size int) {
	if size < 1 {
		size = defaultBlockCacheSize
	}
	n := min(size, blockCacheShards)
	c.shards = make([]blockCacheShard, n)
	for i := range c.shards {
		// Spread size over the shards so that their capacities add up
		// to exactly size.
		capacity := size / n
		if i < size%n {
			capacity++
		}
		c.shards[i] = blockCacheShard{index: make(map[blockCacheKey]int, capacity), slots: make([]blockCacheSlot, capacity)}
	}
}

// ready makes the shards of a zero BlockCache on its first use.
func (c *BlockCache) ready() {
	c.once.Do(func() { c.makeShards(defaultBlockCacheSize) })
}

// len returns the number of blocks the cache holds.
func (c *BlockCache) len() int {
	c.ready()
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.index)
		s.mu.RUnlock()
	}
	return n
}

// blockCacheDomain separates this use of SHA-256 from every other.
const blockCacheDomain = "parley grant.BlockCache v1\x00"

// key returns the cache key of one signature check. pub and sig have fixed
// lengths (checked by the caller), so the input encodes the triple
// unambiguously.
func (c *BlockCache) key(pub ed25519.PublicKey, msg, sig []byte) blockCacheKey {
	h := sha256.New()
	h.Write([]byte(blockCacheDomain))
	h.Write(pub)
	h.Write(sig)
	h.Write(msg)
	var k blockCacheKey
	h.Sum(k[:0])
	return k
}

func (c *BlockCache) shard(k *blockCacheKey) *blockCacheShard {
	return &c.shards[int(k[0])%len(c.shards)]
}

// has reports whether the signature check of k succeeded before.
func (c *BlockCache) has(k *blockCacheKey) bool {
	s := c.shard(k)
	s.mu.RLock()
	i, ok := s.index[*k]
	if ok {
		s.slots[i].ref.Store(true)
	}
	s.mu.RUnlock()
	return ok
}

// add records that the signature check of k succeeded.
func (c *BlockCache) add(k *blockCacheKey) {
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.index[*k]; ok {
		return
	}
	// CLOCK: every pass of the hand clears the ref bits it meets, so the
	// loop ends within two turns.
	for {
		slot := &s.slots[s.hand]
		i := s.hand
		s.hand = (s.hand + 1) % len(s.slots)
		if slot.used && slot.ref.Load() {
			slot.ref.Store(false)
			continue
		}
		if slot.used {
			delete(s.index, slot.key)
		}
		slot.key, slot.used = *k, true
		slot.ref.Store(false)
		s.index[*k] = i
		return
	}
}

// verifySignature is ed25519.Verify(pub, msg, sig), answered from c when it
// already holds the triple; c may be nil.
func (c *BlockCache) verifySignature(pub ed25519.PublicKey, msg, sig []byte) bool {
	// The key's encoding is unambiguous only for these lengths.
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return false
	}
	if c == nil {
		return ed25519.Verify(pub, msg, sig)
	}
	c.ready()
	k := c.key(pub, msg, sig)
	if c.has(&k) {
		return true
	}
	if !ed25519.Verify(pub, msg, sig) {
		return false
	}
	c.add(&k)
	return true
}
