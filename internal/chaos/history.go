package chaos

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// The data model of every workload: a counter item per key holding
//
//	n       the counter
//	lastOp  the id of the increment that wrote n
//
// An increment reads (n, lastOp) and writes (n+1, its own id), so each write names
// itself and each read names the write it saw. As a register of pairs this makes the
// history checkable exactly: an increment is linearizable only where the state equals
// what it read, and a write that was never acknowledged but was seen by someone is
// known to have happened (see resolve).

type opKind uint8

const (
	opIncr opKind = iota
	opRead
)

type opStatus uint8

const (
	stOK      opStatus = iota // acknowledged
	stUnknown                 // outcome unknown (timeout, 5xx, reset, crash mid-write)
	stFailed                  // definitely not applied (refused by a condition, throttled...)
)

func (s opStatus) String() string {
	return [...]string{"ok", "unknown", "failed"}[s]
}

// op is one operation of the history.
type op struct {
	ID       string // increment id, written to lastOp (reads: "")
	Part     string // partition: strategy/key
	Strategy string
	Kind     opKind
	Client   int
	Call     int64 // ns since the run's start
	Return   int64 // ns since the run's start; math.MaxInt64 while unknown
	Status   opStatus
	ObsN     int64  // n read (increments: the value the write is based on)
	ObsLast  string // lastOp read
	ObsAdds  int64  // adds read (final reads of locking-read items)

	// For refused writes under a lease: the holder's lease was still valid by its local
	// clock when the refusal came back (a lower-bound estimate). Then another client got
	// the lock while this one held it: a mutual-exclusion violation, unless the write
	// turns out to have landed after all (then the refusal was a misreport).
	RefusedWhileValid bool
	Note              string
}

// history records the operations of a run.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []*op
}

func newHistory(start time.Time) *history { return &history{start: start} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// begin records the invocation of an operation.
func (h *history) begin(o *op) *op {
	o.Call = h.now()
	o.Return = math.MaxInt64
	o.Status = stUnknown
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
	return o
}

// end records its response.
func (h *history) end(o *op, st opStatus) {
	t := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	o.Status = st
	if st == stUnknown {
		o.Return = math.MaxInt64
	} else {
		o.Return = t
	}
}

// add records a finished operation (reads).
func (h *history) add(o *op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

func (h *history) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// snapshot copies the history; call it only once every operation has ended.
func (h *history) snapshot() []op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]op, len(h.ops))
	for i, o := range h.ops {
		out[i] = *o
	}
	return out
}

// monitor watches the critical sections of one process for two holders at once and for
// fencing tokens that do not rise.
//
// A holder enters after Acquire returned, only while its lease is still valid by its own
// clock (Lease.Remaining), and leaves before it starts to release. When a holder enters
// while another registered holder of the same key still has a valid lease, the lock
// admitted two live holders: the newcomer's takeover happened while the old lease was
// still certainly valid (Remaining is a lower bound: it counts from the start of the last
// successful acquire or renew call). Paused and crashed holders are no exception: their
// lease runs out on the clock whether they run or not.
//
// Holders in other processes (crash and pause holders) are registered with a lower
// bound of their validity: the start of their acquire call plus the lease.
type monitor struct {
	mu          sync.Mutex
	holders     map[string]map[*holderEntry]bool
	lastToken   map[string]int64
	lastWho     map[string]string // who entered with lastToken
	violations  []string
	regressions []string
}

type holderEntry struct {
	who       string
	token     int64
	remaining func() time.Duration // nil: external holder, see until
	until     time.Time            // external holder: lease certainly valid before this
}

func (e *holderEntry) valid(now time.Time) bool {
	if e.remaining != nil {
		return e.remaining() > 0
	}
	return now.Before(e.until)
}

func newMonitor() *monitor {
	return &monitor{holders: map[string]map[*holderEntry]bool{}, lastToken: map[string]int64{}, lastWho: map[string]string{}}
}

// enter registers a holder of part; it returns nil (and registers nothing) when the
// lease is no longer valid, so the caller must not write.
func (m *monitor) enter(part, who string, token int64, remaining func() time.Duration) *holderEntry {
	if remaining() <= 0 {
		return nil
	}
	e := &holderEntry{who: who, token: token, remaining: remaining}
	m.register(part, e)
	return e
}

// enterExternal registers a holder in another process. If its lease may already have
// ended (the parent learned of it late), nothing is checked or registered: others may
// legitimately have entered since.
func (m *monitor) enterExternal(part, who string, token int64, until time.Time) *holderEntry {
	if !time.Now().Before(until) {
		return nil
	}
	e := &holderEntry{who: who, token: token, until: until}
	m.register(part, e)
	return e
}

func (m *monitor) register(part string, e *holderEntry) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	hs := m.holders[part]
	if hs == nil {
		hs = map[*holderEntry]bool{}
		m.holders[part] = hs
	}
	for other := range hs {
		if other.remaining == nil && !other.valid(now) {
			delete(hs, other) // a dead external holder whose lease has run out
			continue
		}
		if other.valid(now) {
			m.violations = append(m.violations, fmt.Sprintf(
				"%s: %s (token %d) entered while %s (token %d) still held a valid lease (until %v now %v)", part, e.who, e.token, other.who, other.token, other.until, now))
		}
	}
	// A lease continued by bypass (lockcore.WithBypass) enters again with its token:
	// the same holder (who names the lease), the same tenure.
	if last, ok := m.lastToken[part]; ok && (e.token < last || e.token == last && e.who != m.lastWho[part]) {
		m.regressions = append(m.regressions, fmt.Sprintf(
			"%s: %s entered with token %d after token %d had entered", part, e.who, e.token, last))
	}
	if e.token > m.lastToken[part] {
		m.lastToken[part], m.lastWho[part] = e.token, e.who
	}
	hs[e] = true
}

func (m *monitor) exit(part string, e *holderEntry) {
	if e == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.holders[part], e)
}

// regression records a fencing problem found at the data.
func (m *monitor) regression(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.regressions = append(m.regressions, fmt.Sprintf(format, args...))
}

// violation records a mutual-exclusion problem found at the data.
func (m *monitor) violation(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violations = append(m.violations, fmt.Sprintf(format, args...))
}

func (m *monitor) results() (violations, regressions []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.violations...), append([]string(nil), m.regressions...)
}
