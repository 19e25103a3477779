package ddbmodel

import (
	"math/rand/v2"
	"sync"
)

// Read describes an eventually consistent read to a Staleness policy.
type Read struct {
	Op    string // "GetItem", "Query" or "Scan"
	Table string
	PK    string // the partition read ("" for a Scan)
	SK    string // the item's sort key (GetItem)
}

// Staleness picks what an eventually consistent read sees. Strongly consistent reads and
// every write see the latest state.
type Staleness interface {
	// ReadSeq returns the write after which the read sees the tables: a number in
	// [oldest, latest], where latest is DB.Seq() and oldest the oldest state the DB
	// still holds (it clamps answers outside that range). The whole read (every item of
	// a Query or Scan page) sees that one state, as a read served by one replica does.
	ReadSeq(r Read, oldest, latest uint64) uint64
}

// Latest serves every read from the latest state: DynamoDB Local's behaviour, and the
// default.
type Latest struct{}

// ReadSeq returns latest.
func (Latest) ReadSeq(_ Read, _, latest uint64) uint64 { return latest }

// StalenessFunc adapts a function to Staleness.
type StalenessFunc func(r Read, oldest, latest uint64) uint64

// ReadSeq calls f.
func (f StalenessFunc) ReadSeq(r Read, oldest, latest uint64) uint64 { return f(r, oldest, latest) }

// RandomLag serves an eventually consistent read from a state up to MaxLag writes old
// with probability P, and from the latest state otherwise. Its choices come from a
// generator seeded by Seed, so the same reads in the same order see the same states.
type RandomLag struct {
	mu     sync.Mutex
	rng    *rand.Rand
	p      float64
	maxLag uint64
}

// NewRandomLag returns a RandomLag policy.
func NewRandomLag(seed uint64, p float64, maxLag uint64) *RandomLag {
	return &RandomLag{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), p: p, maxLag: maxLag}
}

// ReadSeq picks the state.
func (r *RandomLag) ReadSeq(_ Read, oldest, latest uint64) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxLag == 0 || r.rng.Float64() >= r.p {
		return latest
	}
	lag := 1 + r.rng.Uint64N(r.maxLag)
	if latest-oldest < lag {
		return oldest
	}
	return latest - lag
}
