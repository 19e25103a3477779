package lockcore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// InspectorAPI is the subset of the DynamoDB API an Inspector calls: GetItem, Query and
// Scan to read, TransactWriteItems for ForceRelease only. *dynamodb.Client satisfies it.
type InspectorAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

var _ InspectorAPI = (*dynamodb.Client)(nil)

// Strategy names a locking strategy as the Inspector reports it.
type Strategy string

// Strategies.
const (
	StrategyMutex  Strategy = "mutex"  // Mutex: one row, sort key "<namespace>"
	StrategyTicket Strategy = "ticket" // TicketLock: one row, sort key "<namespace>#ticket"
	StrategyQueue  Strategy = "queue"  // Queue: "<namespace>#counter" and "<namespace>#t#<ticket>" rows
	StrategyItem   Strategy = "item"   // ItemLocker: lock attributes on a data item
	// StrategyVersioned names Versioned in option errors; it holds no locks to inspect.
	StrategyVersioned Strategy = "versioned"
)

// ParseStrategy parses "mutex", "ticket", "queue" or "item".
func ParseStrategy(s string) (Strategy, error) {
	switch st := Strategy(s); st {
	case StrategyMutex, StrategyTicket, StrategyQueue, StrategyItem:
		return st, nil
	}
	return "", invalidOption("strategy", "%q: want mutex, ticket, queue or item", s)
}

// LockState is the state of a lock as an Inspector sees it.
//
// A lock is
//
//   - held: a lease is recorded and its holder's recorded lease end has not passed (by
//     the Inspector's wall clock, plus the skew allowance);
//   - abandoned: a lease is recorded as held, but the holder's recorded wall-clock lease
//     end plus the skew allowance (InspectSkew, default DefaultInspectSkew) lies in the
//     past. The holder stopped renewing (it crashed, froze, or is paused) and nobody has
//     taken the lock over or removed the row yet. This is informational only: a paused
//     holder may renew a moment later, and lockcore itself never decides anything on
//     wall clocks in its default mode (waiters take over by observation, see
//     ObserveTakeover);
//   - released: no lease is recorded (the row was released, its last ticket was served
//     or withdrawn, or the queue is empty).
//
// A TicketLock row records no wall-clock lease end (handoffs carry none), so a ticket
// lock is never reported abandoned by one read; watch its (serving, revision) instead:
// a holder whose pair stays unchanged for a full lease is skipped by its waiters. A Mutex
// row records the served ticket's lease end (written by the handoff that served it and
// by every heartbeat); a holder shows as held without a lease end only after a
// force-release handed the lock on, until its first heartbeat.
type LockState string

// Lock states.
const (
	LockHeld      LockState = "held"
	LockAbandoned LockState = "abandoned"
	LockReleased  LockState = "released"
)

// ParseLockState parses "held", "abandoned" or "released".
func ParseLockState(s string) (LockState, error) {
	switch st := LockState(s); st {
	case LockHeld, LockAbandoned, LockReleased:
		return st, nil
	}
	return "", invalidOption("state", "%q: want held, abandoned or released", s)
}

// ErrLockNotFound means no lock row exists for the key (and namespace, strategy) asked about.
var ErrLockNotFound = errors.New("lockcore: no such lock")

// FenceInfo is a fencing token with its parts decoded. For Mutex and TicketLock tokens
// Epoch numbers the lock row's lives and Seq the acquisitions (tickets) within one; a
// Queue's token is its ticket number (Epoch 0); for an ItemLocker's, Epoch is the start
// of the item's life in µs since 1970 (0 for a life begun by a client of the previous
// release) and Seq the ticket within that life (see ItemLease.Token).
type FenceInfo struct {
	Token Fence `json:"token"`
	Epoch int64 `json:"epoch"`
	Seq   int64 `json:"seq"`
}

func fenceInfo(f Fence) FenceInfo { return FenceInfo{Token: f, Epoch: f.Epoch(), Seq: f.Seq()} }

// itemFenceInfo decodes an ItemLocker's token from the item's epoch and ticket.
func itemFenceInfo(epoch, n int64) FenceInfo {
	return FenceInfo{Token: itemFence(epoch, n), Epoch: max(epoch, 0), Seq: n}
}

// String formats the token as "token (epoch E, seq S)", or the plain number for a token
// without an epoch (a Queue's ticket).
func (f FenceInfo) String() string {
	if f.Epoch == 0 {
		return f.Token.String()
	}
	return fmt.Sprintf("%d (epoch %d, seq %d)", int64(f.Token), f.Epoch, f.Seq)
}

// LockHolder is the lease a lock is held under. Fields a strategy does not record are
// zero: a TicketLock records no owner name, acquisition time or wall-clock lease end
// (its LeaseID reads "ticket N").
//
// In JSON the lease duration is "lease", a Go duration string ("2.5s"), and "leaseMs",
// the same in whole milliseconds (the unit lockcore records it in).
type LockHolder struct {
	Owner   string `json:"owner,omitempty"`
	LeaseID string `json:"leaseId"`
	// LeaseSuffix is set when LeaseID reads "ticket N" but the row names the ticket's
	// entry (a TicketLock; a Mutex holder handed the lock, until its first heartbeat
	// records its owner): the holder's lease id, as its process logs it, is
	// "<owner>#<LeaseSuffix>".
	LeaseSuffix string        `json:"leaseIdSuffix,omitempty"`
	Ticket      int64         `json:"ticket,omitempty"`    // TicketLock and Queue
	AcquiredAt  time.Time     `json:"acquiredAt,omitzero"` // Mutex; ItemLocker: last acquisition or renewal
	Heartbeat   time.Time     `json:"heartbeat,omitzero"`  // Queue: last heartbeat (holder's clock)
	Until       time.Time     `json:"leaseEnd,omitzero"`   // holder's wall-clock lease end
	Lease       time.Duration `json:"-"`                   // lease duration (JSON: "lease", "leaseMs")
}

// MatchesLease reports whether id, a lease id as a client has it (Lease.ID), names this
// lease: LeaseID itself, or "<owner>#<LeaseSuffix>" for any owner.
func (h *LockHolder) MatchesLease(id string) bool {
	return h != nil && matchesLease(h.LeaseID, h.LeaseSuffix, id)
}

func matchesLease(leaseID, suffix, id string) bool {
	return id != "" && (id == leaseID || (suffix != "" && strings.HasSuffix(id, nsSeparator+suffix)))
}

// lockHolderFields is LockHolder without its JSON methods.
type lockHolderFields LockHolder

type lockHolderJSON struct {
	lockHolderFields
	Lease   string `json:"lease,omitempty"`
	LeaseMs int64  `json:"leaseMs,omitempty"`
}

// MarshalJSON writes the lease duration as "lease" ("2.5s") and "leaseMs" (2500).
func (h LockHolder) MarshalJSON() ([]byte, error) {
	v := lockHolderJSON{lockHolderFields: lockHolderFields(h)}
	if h.Lease > 0 {
		v.Lease, v.LeaseMs = h.Lease.String(), h.Lease.Milliseconds()
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (h *LockHolder) UnmarshalJSON(b []byte) error {
	var v lockHolderJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*h = LockHolder(v.lockHolderFields)
	switch {
	case v.Lease != "":
		d, err := time.ParseDuration(v.Lease)
		if err != nil {
			return fmt.Errorf("lockcore: holder lease %q: %w", v.Lease, err)
		}
		h.Lease = d
	default:
		h.Lease = time.Duration(v.LeaseMs) * time.Millisecond
	}
	return nil
}

// Waiter is one client waiting for a Mutex, TicketLock or Queue (Show) or an ItemLocker's
// item (ShowItem), in the order it will enter.
type Waiter struct {
	Position int    `json:"position"` // 1: next to enter
	Ticket   int64  `json:"ticket"`
	Owner    string `json:"owner,omitempty"` // Queue only (ticket entries carry no names)
	LeaseID  string `json:"leaseId"`         // "ticket N" for a TicketLock
	// LeaseSuffix: as LockHolder's, for a waiter whose LeaseID reads "ticket N".
	LeaseSuffix string    `json:"leaseIdSuffix,omitempty"`
	Heartbeat   time.Time `json:"heartbeat,omitzero"` // Queue only
	Until       time.Time `json:"leaseEnd,omitzero"`  // Queue only
	Revision    int64     `json:"revision,omitempty"`
	Abandoned   bool      `json:"abandoned,omitempty"` // Queue only: lease end + skew passed
}

// MatchesLease reports whether id, a lease id as a client has it (Lease.ID), names this
// waiter: LeaseID itself, or "<owner>#<LeaseSuffix>" for any owner.
func (w Waiter) MatchesLease(id string) bool { return matchesLease(w.LeaseID, w.LeaseSuffix, id) }

// TicketCounters are the counters of a TicketLock (Serving, Next, Released, Skipped) or
// a Queue (Next only: the last ticket issued).
type TicketCounters struct {
	Serving  int64  `json:"serving,omitempty"`
	Next     int64  `json:"next"`
	Released int64  `json:"lastReleased,omitempty"`
	Skipped  int64  `json:"lastSkipped,omitempty"`
	Life     string `json:"life,omitempty"`
}

// Lock is one lock as an Inspector saw it.
type Lock struct {
	Key       string    `json:"key"`
	Namespace string    `json:"namespace"`
	Strategy  Strategy  `json:"strategy"`
	State     LockState `json:"state"`
	// Holder is the current lease; nil when released.
	Holder *LockHolder `json:"holder,omitempty"`
	// Fence is the holder's token, or the last one issued when released.
	Fence FenceInfo `json:"fence"`
	// Revision bumps on every acquisition and renewal (TicketLock: every handoff and
	// heartbeat; Queue: the holder row's).
	Revision int64           `json:"revision"`
	Waiters  []Waiter        `json:"waiters,omitempty"`
	Tickets  *TicketCounters `json:"tickets,omitempty"`
	// Data is the data stored with the lease (Mutex). In JSON it is "data", the text
	// itself when it is valid UTF-8 ("dataEncoding": "text"), else base64
	// ("dataEncoding": "base64").
	Data    []byte    `json:"-"`
	Expires time.Time `json:"ttlExpiresAt,omitzero"` // the row's TTL (Queue: the counter's, none)
	// LastForced is the last force-release recorded on the lock row.
	LastForced *ForceRecord `json:"lastForced,omitempty"`
	// Audit holds the force-release history rows, oldest first (Show only).
	Audit []ForceRecord `json:"audit,omitempty"`
	// ReadAt is the Inspector's clock when the lock was read.
	ReadAt time.Time `json:"readAt"`
}

// lockFields is Lock without its JSON methods.
type lockFields Lock

type lockJSON struct {
	lockFields
	Data         *string `json:"data,omitempty"`
	DataEncoding string  `json:"dataEncoding,omitempty"`
}

// Data encodings in a Lock's JSON.
const (
	dataText   = "text"
	dataBase64 = "base64"
)

// MarshalJSON writes Data as readable text when it is valid UTF-8, else as base64, and
// says which in "dataEncoding".
func (l Lock) MarshalJSON() ([]byte, error) {
	v := lockJSON{lockFields: lockFields(l)}
	if len(l.Data) > 0 {
		d, enc := string(l.Data), dataText
		if !utf8.Valid(l.Data) {
			d, enc = base64.StdEncoding.EncodeToString(l.Data), dataBase64
		}
		v.Data, v.DataEncoding = &d, enc
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (l *Lock) UnmarshalJSON(b []byte) error {
	var v lockJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Lock(v.lockFields)
	if v.Data == nil {
		return nil
	}
	switch v.DataEncoding {
	case dataBase64:
		d, err := base64.StdEncoding.DecodeString(*v.Data)
		if err != nil {
			return fmt.Errorf("lockcore: lock data: %w", err)
		}
		l.Data = d
	case dataText, "":
		l.Data = []byte(*v.Data)
	default:
		return fmt.Errorf("lockcore: lock data encoding %q: want text or base64", v.DataEncoding)
	}
	return nil
}

// DefaultInspectSkew is the wall-clock skew allowance an Inspector adds to a holder's
// recorded lease end before calling its lease abandoned.
const DefaultInspectSkew = 5 * time.Second

// InspectorOption configures an Inspector.
type InspectorOption func(*Inspector) error

// InspectClock replaces the Inspector's clock (tests).
func InspectClock(c Clock) InspectorOption {
	return func(in *Inspector) error {
		if c == nil {
			return invalidOption("clock", "must not be nil")
		}
		in.clock = c
		return nil
	}
}

// InspectSkew sets the skew allowance added to a holder's recorded lease end before its
// lease is called abandoned (default DefaultInspectSkew).
func InspectSkew(d time.Duration) InspectorOption {
	return func(in *Inspector) error {
		if d < 0 {
			return invalidOption("skew", "must not be negative, got %s", d)
		}
		in.skew = d
		return nil
	}
}

// InspectRetention sets how long a force-released row is kept before TTL removes it
// (default DefaultRetention, as a released row).
func InspectRetention(d time.Duration) InspectorOption {
	return func(in *Inspector) error {
		if d <= 0 {
			return invalidOption("retention", "must be positive, got %s", d)
		}
		in.retention = d
		return nil
	}
}

// Inspector reads the locks of one lock table (and, with ShowItem, the lock attributes
// of data items). It is safe for concurrent use.
type Inspector struct {
	db        InspectorAPI
	table     string
	clock     Clock
	skew      time.Duration
	retention time.Duration
	names     TableAttributes
}

// NewInspector returns an Inspector on the lock table. It validates the options.
func NewInspector(db InspectorAPI, table string, opts ...InspectorOption) (*Inspector, error) {
	if db == nil {
		return nil, invalidOption("db", "must not be nil")
	}
	if table == "" {
		return nil, invalidOption("table", "must not be empty")
	}
	in := &Inspector{db: db, table: table, clock: SystemClock, skew: DefaultInspectSkew, retention: DefaultRetention, names: DefaultTableAttributes}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(in); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// Table returns the lock table's name.
func (in *Inspector) Table() string { return in.table }

// Row kinds by sort key: "<ns>" (Mutex), "<ns>#ticket" (TicketLock), "<ns>#counter" and
// "<ns>#t#<ticket>" (Queue), "<ns>#audit#<strategy>#<time>#<id>" (force-release audit).
// A Queue's "<ns>#resv" row (its places in line) says nothing about who holds or waits
// and is skipped as rowUnknown. The sort key only proposes a kind: lockRow confirms it
// by the row's attributes.
type rowKind int

const (
	rowUnknown rowKind = iota
	rowMutex
	rowTicket
	rowQueueCounter
	rowQueueTicket
	rowAudit
)

// auditInfix separates a namespace from the audit row suffix. No strategy writes a sort
// key of this form (namespaces cannot contain '#', and the strategies' suffixes are
// "#ticket", "#counter", "#resv" and "#t#"), so audit rows never collide with lock rows.
const auditInfix = "#audit#"

func classifySK(sk string) (rowKind, string) {
	ns, rest, found := strings.Cut(sk, nsSeparator)
	switch {
	case !found:
		return rowMutex, ns
	case rest == "ticket":
		return rowTicket, ns
	case rest == "counter":
		return rowQueueCounter, ns
	case strings.HasPrefix(rest, "t#"):
		return rowQueueTicket, ns
	case strings.HasPrefix(rest, strings.TrimPrefix(auditInfix, nsSeparator)):
		return rowAudit, ns
	}
	return rowUnknown, ns
}

// lockRow classifies a row of the lock table: by its sort key, and then by the
// attributes lockcore always writes on a row of that kind. A lock table may hold other
// items with the same key shape (an application's own rows, data items an ItemLocker
// locks there), and their sort keys may look like a lock's ("lock", "jobs#counter"):
// the sort key alone would list each of them as a released lock. Anything that is not
// a lock row of lockcore is rowUnknown.
//
// The attributes every row of a kind carries, however it was last written:
//
//   - Mutex, ticket format: state "fair", fence, serving, rev (numbers) and life (a
//     string), all set by the take that made the row ticket-format;
//   - Mutex, previous release's format: state "held" or "released", leaseId (a string)
//     and rev (a number), set by its every acquisition;
//   - TicketLock: next, serving, rev (numbers) and life (a string), set by the first take;
//   - Mutex or TicketLock row made by a withdrawn ticket request that never landed
//     (withdrawUnknown on an absent row): only w#<id> tombstones and expiresAt;
//   - Queue counter: next (a number);
//   - Queue ticket row: ticket (a number, the one its sort key spells), leaseId (a
//     string), rev (a number);
//   - audit row: strategy, namespace (its sort key's) and forcedId (strings), forcedAt
//     (a number).
func lockRow(it item, names TableAttributes) (rowKind, string) {
	kind, ns := classifySK(attrS(it, names.SortKey))
	if ns == "" || attrS(it, names.PartitionKey) == "" {
		return rowUnknown, ns
	}
	ok := false
	switch kind {
	case rowMutex:
		ok = isMutexRow(it, names)
	case rowTicket:
		ok = (hasN(it, attrNext, attrServing, attrRev) && attrS(it, attrLife) != "") || isBareRow(it, names)
	case rowQueueCounter:
		ok = hasN(it, attrNext)
	case rowQueueTicket:
		tk, has := attrN(it, attrTicket)
		ok = has && tk > 0 && attrS(it, names.SortKey) == ticketSK(ns, tk) && attrS(it, attrLeaseID) != "" && hasN(it, attrRev)
	case rowAudit:
		ok = attrS(it, attrAuditStrategy) != "" && attrS(it, attrAuditNS) == ns && attrS(it, attrForcedID) != "" && hasN(it, attrForcedAt)
	}
	if !ok {
		return rowUnknown, ns
	}
	return kind, ns
}

func isMutexRow(it item, names TableAttributes) bool {
	if _, has := it[attrState]; !has {
		return isBareRow(it, names)
	}
	switch attrS(it, attrState) {
	case stateFair:
		return hasN(it, attrFence, attrServing, attrRev) && attrS(it, attrLife) != ""
	case stateHeld, stateReleased:
		return hasN(it, attrRev) && attrS(it, attrLeaseID) != ""
	}
	return false
}

// isBareRow reports a row that holds nothing but tombstones of ticket requests (and
// its TTL): what a withdrawn, never-landed request of a Mutex or TicketLock leaves on a
// row that did not exist. The next take turns it into a full row.
func isBareRow(it item, names TableAttributes) bool {
	tombs := 0
	for k, v := range it {
		switch {
		case k == names.PartitionKey || k == names.SortKey:
		case k == names.TTL:
			if _, ok := v.(*types.AttributeValueMemberN); !ok {
				return false
			}
		case strings.HasPrefix(k, waiterPrefix):
			if t, ok := v.(*types.AttributeValueMemberS); !ok || !strings.HasPrefix(t.Value, tombPrefix) {
				return false
			}
			tombs++
		default:
			return false
		}
	}
	return tombs > 0
}

// hasN reports whether every one of attrs is a number attribute of it.
func hasN(it item, attrs ...string) bool {
	for _, a := range attrs {
		if _, ok := attrN(it, a); !ok {
			return false
		}
	}
	return true
}

func (in *Inspector) abandoned(until time.Time, now time.Time) bool {
	return !until.IsZero() && until.Add(in.skew).Before(now)
}

func msTime(it item, attr string) time.Time {
	if v, ok := attrN(it, attr); ok && v > 0 {
		return time.UnixMilli(v)
	}
	return time.Time{}
}

func secTime(it item, attr string) time.Time {
	if v, ok := attrN(it, attr); ok && v > 0 {
		return time.Unix(v, 0)
	}
	return time.Time{}
}

// mutexLock decodes a Mutex row.
func (in *Inspector) mutexLock(it item, now time.Time) Lock {
	if attrS(it, attrState) == stateFair {
		return in.fairMutexLock(it, now)
	}
	key, ns := attrS(it, in.names.PartitionKey), attrS(it, in.names.SortKey)
	rev, _ := attrN(it, attrRev)
	epoch, _ := attrN(it, attrEpoch)
	fence, _ := attrN(it, attrFence)
	l := Lock{Key: key, Namespace: ns, Strategy: StrategyMutex, State: LockReleased,
		Fence: fenceInfo(makeFence(epoch, fence)), Revision: rev, Expires: secTime(it, in.names.TTL),
		LastForced: forcedOnRow(it, in.names, StrategyMutex), ReadAt: now}
	if attrS(it, attrState) == stateHeld {
		ms, _ := attrN(it, attrLeaseMs)
		l.Holder = &LockHolder{Owner: attrS(it, attrOwner), LeaseID: attrS(it, attrLeaseID),
			AcquiredAt: msTime(it, attrAcquiredAt), Until: msTime(it, attrUntil),
			Lease: time.Duration(ms) * time.Millisecond}
		l.Data = attrB(it, attrData)
		l.State = LockHeld
		if in.abandoned(l.Holder.Until, now) {
			l.State = LockAbandoned
		}
	}
	return l
}

// fairMutexLock decodes a Mutex row in the ticket format: the served ticket's entry is
// the holder (abandoned when its recorded lease end plus the skew allowance passed; its
// owner as recorded by hOwner, else none and lease id "ticket N"), the later tickets'
// entries are the waiters, in order (no owner: lease id "ticket N").
func (in *Inspector) fairMutexLock(it item, now time.Time) Lock {
	row := parseMutexRow(it, "")
	l := Lock{Key: attrS(it, in.names.PartitionKey), Namespace: attrS(it, in.names.SortKey), Strategy: StrategyMutex, State: LockReleased,
		Revision: row.rev, Expires: secTime(it, in.names.TTL), LastForced: forcedOnRow(it, in.names, StrategyMutex),
		Tickets: &TicketCounters{Serving: row.serving, Next: row.next, Released: row.rel, Skipped: row.skip, Life: row.life},
		Fence:   fenceInfo(makeFence(row.epoch, min(row.serving, row.next))), ReadAt: now}
	if row.busy() && row.servedEntry {
		h := row.holder()
		l.Holder = &LockHolder{Owner: h.Owner, LeaseID: h.LeaseID, Ticket: row.serving, Until: h.Until, Lease: h.Lease}
		if h.Owner == "" { // "ticket N": the entry id still names the lease
			l.Holder.LeaseSuffix = row.entryID(row.serving)
		}
		if row.hFor == row.serving {
			l.Holder.AcquiredAt = msTime(it, attrHSince)
		}
		l.Data = row.details[row.serving].data
		l.State = LockHeld
		if in.abandoned(l.Holder.Until, now) {
			l.State = LockAbandoned
		}
	}
	var tickets []int64
	for tk := range row.waiters {
		if tk > row.serving {
			tickets = append(tickets, tk)
		}
	}
	slices.Sort(tickets)
	for i, tk := range tickets {
		w := Waiter{Position: i + 1, Ticket: tk, LeaseID: ticketLeaseID(tk), LeaseSuffix: row.entryID(tk)}
		if owner := row.details[tk].owner; owner != "" { // a row of the first ticket-format release
			w.Owner, w.LeaseID, w.LeaseSuffix = owner, owner+nsSeparator+row.entryID(tk), ""
		}
		l.Waiters = append(l.Waiters, w)
	}
	return l
}

// ticketLock decodes a TicketLock row.
func (in *Inspector) ticketLock(it item, ns string, now time.Time) Lock {
	row := parseTicketRow(it, "")
	l := Lock{Key: attrS(it, in.names.PartitionKey), Namespace: ns, Strategy: StrategyTicket, State: LockReleased,
		Revision: row.rev, Expires: secTime(it, in.names.TTL), LastForced: forcedOnRow(it, in.names, StrategyTicket),
		Tickets: &TicketCounters{Serving: row.serving, Next: row.next, Released: row.rel, Skipped: row.skip, Life: row.life},
		ReadAt:  now}
	last := min(row.serving, row.next) // the last ticket allowed in
	l.Fence = fenceInfo(makeFence(row.epoch, last))
	if row.exists && row.serving <= row.next && row.servedEntry {
		l.State = LockHeld
		l.Holder = &LockHolder{LeaseID: ticketLeaseID(row.serving), Ticket: row.serving,
			LeaseSuffix: strings.TrimPrefix(row.waiters[row.serving], waiterPrefix),
			Lease:       time.Duration(row.leaseMs) * time.Millisecond}
	}
	var tickets []int64
	for tk := range row.waiters {
		if tk > row.serving {
			tickets = append(tickets, tk)
		}
	}
	slices.Sort(tickets)
	for i, tk := range tickets {
		l.Waiters = append(l.Waiters, Waiter{Position: i + 1, Ticket: tk, LeaseID: ticketLeaseID(tk),
			LeaseSuffix: strings.TrimPrefix(row.waiters[tk], waiterPrefix)})
	}
	return l
}

func ticketLeaseID(t int64) string { return "ticket " + strconv.FormatInt(t, 10) }

// queueLock decodes a Queue from its counter row and its ticket rows (in ticket order).
func (in *Inspector) queueLock(key, ns string, counter item, rows []item, now time.Time) Lock {
	next, _ := attrN(counter, attrNext)
	l := Lock{Key: key, Namespace: ns, Strategy: StrategyQueue, State: LockReleased,
		Fence: fenceInfo(Fence(next)), Tickets: &TicketCounters{Next: next},
		LastForced: forcedOnRow(counter, in.names, StrategyQueue), ReadAt: now}
	for i, r := range rows {
		tk, _ := attrN(r, attrTicket)
		rev, _ := attrN(r, attrRev)
		ms, _ := attrN(r, attrLeaseMs)
		until := msTime(r, attrUntil)
		if i == 0 {
			l.Holder = &LockHolder{Owner: attrS(r, attrOwner), LeaseID: attrS(r, attrLeaseID), Ticket: tk,
				Heartbeat: msTime(r, attrHB), Until: until, Lease: time.Duration(ms) * time.Millisecond}
			l.Fence, l.Revision, l.Expires = fenceInfo(Fence(tk)), rev, secTime(r, in.names.TTL)
			l.State = LockHeld
			if in.abandoned(until, now) {
				l.State = LockAbandoned
			}
			continue
		}
		l.Waiters = append(l.Waiters, Waiter{Position: i, Ticket: tk, Owner: attrS(r, attrOwner),
			LeaseID: attrS(r, attrLeaseID), Heartbeat: msTime(r, attrHB), Until: until, Revision: rev,
			Abandoned: in.abandoned(until, now)})
	}
	return l
}

// ShowOptions narrow Show to one namespace and/or strategy.
type ShowOptions struct {
	Namespace string   // "" = every namespace
	Strategy  Strategy // "" = every strategy (not StrategyItem: use ShowItem)
}

// Show reads every lock on key (all namespaces and strategies unless opts narrow it)
// with strongly consistent, paginated Queries of the key's partition, together with
// each lock's force-release history. It returns an error matching ErrLockNotFound when
// there is none.
func (in *Inspector) Show(ctx context.Context, key string, opts ShowOptions) ([]Lock, error) {
	if err := validatePK("key", key); err != nil {
		return nil, err
	}
	if opts.Namespace != "" {
		if err := validateSK("namespace", opts.Namespace, 0); err != nil {
			return nil, err
		}
	}
	if opts.Strategy != "" {
		if _, err := ParseStrategy(string(opts.Strategy)); err != nil {
			return nil, err
		}
		if opts.Strategy == StrategyItem {
			return nil, invalidOption("strategy", "item locks live on data items: use ShowItem")
		}
	}
	kc := expression.Key(in.names.PartitionKey).Equal(expression.Value(key))
	if opts.Namespace != "" {
		// The namespace's rows: "<ns>" itself and "<ns>#...". begins_with("<ns>") also
		// matches longer namespaces ("<ns>x"): the namespace test below filters those out.
		kc = kc.And(expression.Key(in.names.SortKey).BeginsWith(opts.Namespace))
	}
	items, err := in.query(ctx, kc, true)
	if err != nil {
		return nil, fmt.Errorf("lockcore: show %q: %w", key, err)
	}
	now := in.clock.Now()
	locks := in.assemble(items, now, func(k rowKind, ns string) bool {
		if opts.Namespace != "" && ns != opts.Namespace {
			return false
		}
		return opts.Strategy == "" || opts.Strategy == strategyOf(k)
	})
	if len(locks) == 0 {
		what := fmt.Sprintf("%q", key)
		if opts.Namespace != "" {
			what += " namespace " + strconv.Quote(opts.Namespace)
		}
		if opts.Strategy != "" {
			what += " strategy " + string(opts.Strategy)
		}
		return nil, fmt.Errorf("lockcore: show %s in table %s: %w", what, in.table, ErrLockNotFound)
	}
	return locks, nil
}

func strategyOf(k rowKind) Strategy {
	switch k {
	case rowMutex:
		return StrategyMutex
	case rowTicket:
		return StrategyTicket
	case rowQueueCounter, rowQueueTicket:
		return StrategyQueue
	}
	return ""
}

// assemble turns the rows of one partition (sorted by sort key) into locks, keeping
// those keep accepts, each with its audit history.
func (in *Inspector) assemble(items []item, now time.Time, keep func(rowKind, string) bool) []Lock {
	type qkey struct{ ns string }
	var locks []Lock
	audits := map[string][]ForceRecord{} // ns + "\x00" + strategy → records
	queueRows := map[qkey][]item{}
	counters := map[qkey]item{}
	var queueOrder []qkey
	for _, it := range items {
		kind, ns := lockRow(it, in.names)
		switch kind {
		case rowAudit:
			r := auditRecord(it, in.names)
			audits[ns+"\x00"+string(r.Strategy)] = append(audits[ns+"\x00"+string(r.Strategy)], r)
			continue
		case rowUnknown:
			continue
		}
		if !keep(kind, ns) {
			continue
		}
		switch kind {
		case rowMutex:
			locks = append(locks, in.mutexLock(it, now))
		case rowTicket:
			locks = append(locks, in.ticketLock(it, ns, now))
		case rowQueueCounter:
			if _, seen := counters[qkey{ns}]; !seen {
				queueOrder = append(queueOrder, qkey{ns})
			}
			counters[qkey{ns}] = it
		case rowQueueTicket:
			if _, seen := counters[qkey{ns}]; !seen {
				counters[qkey{ns}] = nil
				queueOrder = append(queueOrder, qkey{ns})
			}
			queueRows[qkey{ns}] = append(queueRows[qkey{ns}], it)
		}
	}
	for _, q := range queueOrder {
		key := ""
		if c := counters[q]; c != nil {
			key = attrS(c, in.names.PartitionKey)
		} else {
			key = attrS(queueRows[q][0], in.names.PartitionKey)
		}
		locks = append(locks, in.queueLock(key, q.ns, counters[q], queueRows[q], now))
	}
	for i := range locks {
		recs := audits[locks[i].Namespace+"\x00"+string(locks[i].Strategy)]
		slices.SortFunc(recs, func(a, b ForceRecord) int { return a.At.Compare(b.At) })
		locks[i].Audit = recs
	}
	slices.SortStableFunc(locks, func(a, b Lock) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(string(a.Strategy), string(b.Strategy))
	})
	return locks
}

// query runs a paginated Query on the lock table.
func (in *Inspector) query(ctx context.Context, kc expression.KeyConditionBuilder, consistent bool) ([]item, error) {
	e, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, err
	}
	var items []item
	var start item
	for {
		out, err := in.db.Query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(in.table),
			KeyConditionExpression:    e.KeyCondition(),
			ExpressionAttributeNames:  e.Names(),
			ExpressionAttributeValues: e.Values(),
			ConsistentRead:            aws.Bool(consistent),
			ExclusiveStartKey:         start,
		})
		if err != nil {
			return nil, err
		}
		items = append(items, out.Items...)
		if len(out.LastEvaluatedKey) == 0 {
			return items, nil
		}
		start = out.LastEvaluatedKey
	}
}

// ListOptions configure one page of List.
type ListOptions struct {
	// PageSize bounds the rows DynamoDB reads for this page (Scan's Limit); 0 reads up
	// to DynamoDB's 1 MB page. A page may hold fewer locks than rows read (lockcore's
	// own rows, queue ticket rows and audit rows are not locks, nor are items of other
	// kinds the table holds; States filters).
	PageSize int32
	// PageToken continues a listing: the Next of the previous page ("" to start).
	PageToken string
	// States keeps only locks in these states (empty: all).
	States []LockState
	// Strategies keeps only locks of these strategies (empty: all lock-table strategies).
	Strategies []Strategy
	// Consistent makes the reads strongly consistent (twice the read capacity).
	Consistent bool
}

// ListPage is one page of a listing.
type ListPage struct {
	Locks []Lock `json:"locks"`
	// Next continues the listing with ListOptions.PageToken; "" when the table is done.
	Next string `json:"next,omitempty"`
}

// List reads one page of the lock table with Scan and returns its locks: Mutex rows,
// TicketLock rows and Queues (one entry per queue, from its counter row; its ticket
// rows are read with a Query of that queue). lockcore's bookkeeping rows (partition
// keys starting with "turnstile#") and audit rows are skipped, and so is every item
// that is not a lock row: a row is recognised by the attributes lockcore always writes
// on its kind (see lockRow), not by its sort key, so a table shared with other items
// (an application's rows, data items locked by an ItemLocker: ShowItem reads those)
// lists its locks only. Call it again with PageToken = Next until Next is "" (or use
// Each).
func (in *Inspector) List(ctx context.Context, opts ListOptions) (ListPage, error) {
	if opts.PageSize < 0 {
		return ListPage{}, invalidOption("pageSize", "must not be negative, got %d", opts.PageSize)
	}
	for _, st := range opts.States {
		if _, err := ParseLockState(string(st)); err != nil {
			return ListPage{}, err
		}
	}
	for _, st := range opts.Strategies {
		if _, err := ParseStrategy(string(st)); err != nil {
			return ListPage{}, err
		}
	}
	start, err := decodePageToken(opts.PageToken, in.names)
	if err != nil {
		return ListPage{}, err
	}
	e := expr(expression.NewBuilder().WithFilter(
		expression.Not(expression.BeginsWith(name(in.names.PartitionKey), reservedPrefix))))
	in2 := &dynamodb.ScanInput{
		TableName:                 aws.String(in.table),
		FilterExpression:          e.Filter(),
		ExpressionAttributeNames:  e.Names(),
		ExpressionAttributeValues: e.Values(),
		ConsistentRead:            aws.Bool(opts.Consistent),
		ExclusiveStartKey:         start,
	}
	if opts.PageSize > 0 {
		in2.Limit = aws.Int32(opts.PageSize)
	}
	out, err := in.db.Scan(ctx, in2)
	if err != nil {
		return ListPage{}, fmt.Errorf("lockcore: list %s: %w", in.table, err)
	}
	now := in.clock.Now()
	var page ListPage
	for _, it := range out.Items {
		kind, ns := lockRow(it, in.names) // not by sort key alone: the table may hold other items
		var l Lock
		switch kind {
		case rowMutex:
			l = in.mutexLock(it, now)
		case rowTicket:
			l = in.ticketLock(it, ns, now)
		case rowQueueCounter:
			key := attrS(it, in.names.PartitionKey)
			rows, err := in.query(ctx, expression.Key(in.names.PartitionKey).Equal(expression.Value(key)).
				And(expression.Key(in.names.SortKey).BeginsWith(ticketPrefix(ns))), opts.Consistent)
			if err != nil {
				return ListPage{}, fmt.Errorf("lockcore: list %s: queue %q: %w", in.table, key, err)
			}
			rows = slices.DeleteFunc(rows, func(r item) bool { k, _ := lockRow(r, in.names); return k != rowQueueTicket })
			l = in.queueLock(key, ns, it, rows, now)
		default:
			continue // queue ticket rows (read with their counter), audit rows
		}
		if (len(opts.States) == 0 || slices.Contains(opts.States, l.State)) &&
			(len(opts.Strategies) == 0 || slices.Contains(opts.Strategies, l.Strategy)) {
			page.Locks = append(page.Locks, l)
		}
	}
	if len(out.LastEvaluatedKey) > 0 {
		if page.Next, err = encodePageToken(out.LastEvaluatedKey, in.names); err != nil {
			return ListPage{}, fmt.Errorf("lockcore: list %s: %w", in.table, err)
		}
	}
	return page, nil
}

// Each lists the whole table (opts.PageToken onwards), calling fn for every lock until
// fn returns an error, which Each returns.
func (in *Inspector) Each(ctx context.Context, opts ListOptions, fn func(Lock) error) error {
	for {
		page, err := in.List(ctx, opts)
		if err != nil {
			return err
		}
		for _, l := range page.Locks {
			if err := fn(l); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		opts.PageToken = page.Next
	}
}

// Page tokens are the Scan's LastEvaluatedKey (the lock table's string keys), as
// base64url JSON.
type pageToken struct {
	PK string `json:"pk"`
	SK string `json:"sk"`
}

func encodePageToken(k item, names TableAttributes) (string, error) {
	pk, ok1 := k[names.PartitionKey].(*types.AttributeValueMemberS)
	sk, ok2 := k[names.SortKey].(*types.AttributeValueMemberS)
	if !ok1 || !ok2 || len(k) != 2 {
		return "", fmt.Errorf("unexpected scan position (is this a lock table with string keys pk and sk?)")
	}
	b, err := json.Marshal(pageToken{PK: pk.Value, SK: sk.Value})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodePageToken(tok string, names TableAttributes) (item, error) {
	if tok == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	var pt pageToken
	if err == nil {
		err = json.Unmarshal(b, &pt)
	}
	if err != nil || pt.PK == "" || pt.SK == "" {
		return nil, invalidOption("pageToken", "not a token returned by List")
	}
	return names.key(pt.PK, pt.SK), nil
}

// ItemLock is what ShowItem reports about the lock attributes of a data item.
type ItemLock struct {
	Table    string            `json:"table"`
	Key      map[string]string `json:"key"` // key attribute → value as text
	State    LockState         `json:"state"`
	Holder   *LockHolder       `json:"holder,omitempty"`
	Fence    FenceInfo         `json:"fence"` // the holder's token (Seq: its ticket in this life of the item), or the last one issued
	Revision int64             `json:"revision"`
	Waiters  []Waiter          `json:"waiters,omitempty"` // tickets waiting, in the order they enter
	Tickets  *TicketCounters   `json:"tickets,omitempty"` // the item's queue (Next: its Fence)
	Exists   bool              `json:"exists"`            // the item exists
	ReadAt   time.Time         `json:"readAt"`
}

// ShowItem reads the lock attributes an ItemLocker keeps on the data item with primary
// key key in table, with a strongly consistent GetItem. attrs names the attributes; its
// zero value means DefaultItemAttributes. Waiters are the item's queued tickets (entries
// carry no names: each reads "ticket N"); a holder whose lease id is not written yet (a
// ticket just handed over) reads "ticket N" too.
func (in *Inspector) ShowItem(ctx context.Context, table string, key map[string]types.AttributeValue, attrs ItemAttributes) (*ItemLock, error) {
	if table == "" {
		return nil, invalidOption("table", "must not be empty")
	}
	if attrs == (ItemAttributes{}) {
		attrs = DefaultItemAttributes
	}
	attrs = attrs.withDefaults()
	if err := WithItemAttributes(attrs)(&config{}); err != nil {
		return nil, err
	}
	il := &ItemLocker{attrs: attrs}
	if err := il.validateKey(key); err != nil {
		return nil, err
	}
	it, err := in.get(ctx, table, key)
	if err != nil {
		return nil, fmt.Errorf("lockcore: show item %s in %s: %w", keyLabel(key), table, err)
	}
	now := in.clock.Now()
	out := &ItemLock{Table: table, Key: map[string]string{}, State: LockReleased, Exists: it != nil, ReadAt: now}
	for k, v := range key {
		out.Key[k] = avText(v)
	}
	st := il.state(it, "")
	out.Fence, out.Revision = itemFenceInfo(st.epoch, st.next), st.rev
	if st.hasServing && st.serving <= st.next {
		out.Fence = itemFenceInfo(st.epoch, st.serving)
	}
	if st.hasQueue || st.hasServing {
		out.Tickets = &TicketCounters{Serving: st.serving, Next: st.next}
		var tks []int64
		for t := range st.waiters {
			if t > st.serving {
				tks = append(tks, t)
			}
		}
		slices.Sort(tks)
		for i, t := range tks {
			out.Waiters = append(out.Waiters, Waiter{Position: i + 1, Ticket: t, LeaseID: fmt.Sprintf("ticket %d", t)})
		}
	}
	switch id := st.lockedBy; {
	case id == "":
	case st.served() == servedGone:
		// Handed to a ticket whose waiter had given up (withdrawn): nobody holds the item,
		// and the next take skips that ticket at once, as the Mutex's and the TicketLock's
		// do (which the Inspector shows as released too). Not abandoned: no holder died.
	default:
		ms := st.leaseMs
		out.Holder = &LockHolder{Owner: st.owner, LeaseID: id,
			AcquiredAt: msTime(it, attrs.LockTime), Until: msTime(it, attrs.Until),
			Lease: time.Duration(ms) * time.Millisecond}
		if st.hasServing && st.ticket == st.serving {
			out.Holder.Ticket = st.ticket
		}
		if id == marker(st.serving) {
			out.Holder.LeaseID = fmt.Sprintf("ticket %d", st.serving)
		}
		out.State = LockHeld
		if in.abandoned(out.Holder.Until, now) {
			out.State = LockAbandoned
		}
	}
	return out, nil
}

func avText(v types.AttributeValue) string {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		return x.Value
	case *types.AttributeValueMemberN:
		return x.Value
	case *types.AttributeValueMemberB:
		return base64.StdEncoding.EncodeToString(x.Value)
	}
	return fmt.Sprintf("%T", v)
}

// get reads one item with a strongly consistent GetItem (nil: no such item).
func (in *Inspector) get(ctx context.Context, table string, key item) (item, error) {
	out, err := in.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}
