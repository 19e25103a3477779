package lockcore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ForceRecord is the audit record of one force-release.
type ForceRecord struct {
	ID        string    `json:"id"`
	Actor     string    `json:"actor"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
	Strategy  Strategy  `json:"strategy"`
	Key       string    `json:"key"`
	Namespace string    `json:"namespace"`
	// The lease it ended: id ("ticket N" for a TicketLock), owner, token.
	LeaseID string    `json:"leaseId"`
	Owner   string    `json:"owner,omitempty"`
	Token   FenceInfo `json:"token"`
}

// ErrNotHeld means a force-release found no lease to end and ended none: the lock is
// released, or the lease the caller named (ForceOptions.LeaseID) is no longer the
// current one.
var ErrNotHeld = errors.New("lockcore: lock not held by the expected lease")

// ForceOptions describe a force-release.
type ForceOptions struct {
	Namespace string   // default "lock"
	Strategy  Strategy // StrategyMutex (default) or StrategyTicket
	Actor     string   // who does it (required): a user name, an IAM ARN
	Reason    string   // why (required, at most 1 KiB)
	// LeaseID, when set, ends only this lease (as Show reported it: a lease id, or
	// "ticket N" for a TicketLock); otherwise the lease current at the call is ended.
	LeaseID string
	// Token, when set, ends only the lease with this fencing token (Show's Fence). It is
	// required with a LeaseID "ticket N" (a TicketLock's holder, or a Mutex holder
	// handed the lock and not yet named on the row): ticket numbers start again at 1
	// when TTL removes a row, so such an id alone could name a later holder.
	Token Fence
}

const maxReasonBytes = 1024

// Attributes of the last force-release kept on a lock row (Queue: its counter row).
const (
	attrForcedBy     = "forcedBy"
	attrForcedAt     = "forcedAt" // ms since the epoch
	attrForcedReason = "forcedReason"
	attrForcedLease  = "forcedLease"
	attrForcedOwner  = "forcedOwner"
	attrForcedToken  = "forcedToken"
	attrForcedID     = "forcedId"

	// Audit row attributes (besides pk, sk).
	attrAuditStrategy = "strategy"
	attrAuditNS       = "namespace"

	forcedLeasePrefix = reservedPrefix + "forced#"
	forceAttempts     = 10
)

func forcedOnRow(it item, names TableAttributes, st Strategy) *ForceRecord {
	id := attrS(it, attrForcedID)
	if id == "" {
		return nil
	}
	tok, _ := attrN(it, attrForcedToken)
	_, ns := classifySK(attrS(it, names.SortKey))
	return &ForceRecord{ID: id, Actor: attrS(it, attrForcedBy), Reason: attrS(it, attrForcedReason),
		At: msTime(it, attrForcedAt), Strategy: st, Key: attrS(it, names.PartitionKey), Namespace: ns,
		LeaseID: attrS(it, attrForcedLease), Owner: attrS(it, attrForcedOwner), Token: fenceInfo(Fence(tok))}
}

func auditRecord(it item, names TableAttributes) ForceRecord {
	tok, _ := attrN(it, attrForcedToken)
	return ForceRecord{ID: attrS(it, attrForcedID), Actor: attrS(it, attrForcedBy), Reason: attrS(it, attrForcedReason),
		At: msTime(it, attrForcedAt), Strategy: Strategy(attrS(it, attrAuditStrategy)), Key: attrS(it, names.PartitionKey),
		Namespace: attrS(it, attrAuditNS), LeaseID: attrS(it, attrForcedLease), Owner: attrS(it, attrForcedOwner),
		Token: fenceInfo(Fence(tok))}
}

func auditSK(ns string, st Strategy, at time.Time, id string) string {
	return ns + auditInfix + string(st) + "#" + at.UTC().Format("20060102T150405.000Z") + "#" + id
}

func (o *ForceOptions) validate(key string) error {
	if o.Namespace == "" {
		o.Namespace = defaultNamespace
	}
	if o.Strategy == "" {
		o.Strategy = StrategyMutex
	}
	if err := validatePK("key", key); err != nil {
		return err
	}
	if err := validateSK("namespace", o.Namespace, len(ticketSuffix)); err != nil {
		return err
	}
	if o.Strategy != StrategyMutex && o.Strategy != StrategyTicket {
		return invalidOption("strategy", "force-release supports mutex and ticket locks, got %q", o.Strategy)
	}
	switch {
	case strings.TrimSpace(o.Actor) == "":
		return invalidOption("actor", "must name who force-releases (a user, an IAM ARN)")
	case len(o.Actor) > 512 || !utf8.ValidString(o.Actor):
		return invalidOption("actor", "must be valid UTF-8 of at most 512 bytes")
	case strings.TrimSpace(o.Reason) == "":
		return invalidOption("reason", "must say why the lease is ended")
	case len(o.Reason) > maxReasonBytes || !utf8.ValidString(o.Reason):
		return invalidOption("reason", "must be valid UTF-8 of at most %d bytes", maxReasonBytes)
	}
	if strings.HasPrefix(o.LeaseID, "ticket ") && o.Token == 0 {
		return invalidOption("token", "lease id %q names a ticket of one life of the lock row only: give the token Show reported too", o.LeaseID)
	}
	// The audit row's sort key must fit.
	if sk := auditSK(o.Namespace, o.Strategy, time.Now(), randomHex(16)); len(sk) > MaxSortKeyBytes {
		return invalidKey("namespace", "too long for the audit row's sort key (%d bytes)", len(sk))
	}
	return nil
}

// ForceRelease ends the current lease of a Mutex or TicketLock, records who did it, when,
// why and which lease it ended, and returns that record. It returns an error matching
// ErrNotHeld when there is no lease to end (or not the one opts.LeaseID names) and this
// call ended none, ErrUnknownOutcome when it cannot tell whether it ended one (see
// below), and ErrInvalidOption / ErrInvalidKey for bad arguments.
//
// It is one TransactWriteItems of two writes, both or neither. The first updates the
// lock row, conditioned on the lease read just before (Mutex and TicketLock: serving
// ticket, row life and the served ticket's entry, which the lease's heartbeats leave
// alone, so that a holder heartbeating faster than the operator's round trip can still
// be ended; a Mutex row of the previous release: lease id, revision and state held, a
// heartbeat of which is re-read and retried), so a lease that changed hands meanwhile is
// never ended by mistake, in the same life of the row only (a lease's token has no epoch
// until its holder wrote the row life's epoch).
//
//   - Mutex: the served ticket is skipped (serving + 1, its entries ended: a tombstone
//     under its entry id, the next ticket's lease end left unrecorded), as a waiter skips a holder that stopped
//     heartbeating; the next ticket enters with a higher token. The old holder's renew,
//     Release and GuardCheck fail with ErrLeaseLost. (A row of the previous release:
//     state released, the lease id replaced by a marker, prevLease naming the ended
//     lease, fence + 1, until and data removed.)
//   - TicketLock: the served ticket is skipped (serving + 1, its entry removed), the
//     write a waiter makes after a holder stopped heartbeating. The old holder's renew,
//     Release and GuardCheck fail with ErrLeaseLost; the next ticket enters with a
//     higher token.
//
// The row keeps the last force-release (attributes forcedBy, forcedAt, forcedReason,
// forcedLease, forcedOwner, forcedToken, forcedId; later acquisitions keep them). The
// second write puts an audit row: partition key = the lock key, sort key
// "<namespace>#audit#<strategy>#<UTC time>#<id>". No strategy writes such a sort key
// (namespaces contain no '#'; the strategies' suffixes are "#ticket", "#counter",
// "#resv" and "#t#"), and the partition key is the user's own lock key, never one with the reserved
// "turnstile#" prefix. Audit rows have no TTL and no "state" (the janitor's sweep
// ignores them); Show returns them as Lock.Audit.
//
// What the old holder can still do: work that is not guarded continues until its next
// heartbeat fails (at most one heartbeat interval); writes guarded with GuardCheck fail
// at once (see GuardedWriteError); writes fenced with FenceCondition fail once the next
// holder has registered its higher token at the resource.
//
// An attempt whose outcome is unknown (a timeout, a reset, a 5xx) is settled by
// re-reading the row (forcedId names this call) and, when the lease is gone but the row
// names another force-release (one that ended the next holder meanwhile), by reading the
// attempt's audit row, whose key the call knows: an attempt that landed returns its
// record, never ErrNotHeld. When those reads cannot be made (the context ends, the
// attempts run out) while an attempt may have landed, the error matches
// ErrUnknownOutcome: see Show's LastForced and Audit before trying again. The SDK's own
// retries are off for it, as for every conditional write.
func (in *Inspector) ForceRelease(ctx context.Context, key string, opts ForceOptions) (*ForceRecord, error) {
	if err := opts.validate(key); err != nil {
		return nil, err
	}
	rec := &ForceRecord{ID: randomHex(16), Actor: opts.Actor, Reason: opts.Reason,
		Strategy: opts.Strategy, Key: key, Namespace: opts.Namespace}
	rowKey := item{in.names.PartitionKey: s(key), in.names.SortKey: s(opts.Namespace)}
	if opts.Strategy == StrategyTicket {
		rowKey[in.names.SortKey] = s(opts.Namespace + ticketSuffix)
	}
	target := opts.LeaseID // the lease to end: fixed by the first read unless given
	// token: the lease's fencing token, fixed by the first read unless given. A lease id
	// may change form between reads (a Mutex holder handed the lock is "ticket N" until
	// its first heartbeat names its owner), and "ticket N" alone names one life of a row
	// only: the token (with its epoch) pins the lease across attempts.
	token := opts.Token
	// life: the lock row's life, fixed by the first read. A holder that has not written
	// its life's fence epoch yet (one that crashed right after its ticket) has a token
	// without one, the same as the same ticket's in the row's next life: a row deleted and
	// created again between two attempts must not let the second end that life's holder.
	life, pinned := "", false
	// pending: the attempts whose outcome is unknown (the record each would have
	// written). Each may have landed, or may still land until the lease it is
	// conditioned on is gone.
	var pending []ForceRecord
	var last error
	for attempt := 0; attempt < forceAttempts; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, time.Duration(attempt)*20*time.Millisecond); err != nil {
				return nil, forceFailed(key, pending, fmt.Errorf("%w (last error: %v)", err, last))
			}
		}
		cur, err := in.get(ctx, in.table, rowKey)
		if err != nil {
			if classify(err) == errFatal {
				return nil, forceFailed(key, pending, err)
			}
			last = err
			continue
		}
		if attrS(cur, attrForcedID) == rec.ID {
			return in.landed(rec, cur), nil // an earlier attempt of this call landed
		}
		now := in.clock.Now()
		rec.At = now
		var upd types.Update
		switch opts.Strategy {
		case StrategyMutex:
			upd, err = in.forceMutex(cur, rowKey, &target, rec, now)
		default:
			upd, err = in.forceTicket(cur, rowKey, &target, rec, now)
		}
		if err == nil && pinned && token != opts.Token && token.Epoch() == 0 && rec.Token.Token.Seq() == token.Seq() &&
			attrS(cur, attrLife) == life {
			// The same ticket of the same row life, its holder having written the life's
			// epoch since our read (which failed our attempt: epochAsRead): the same lease.
			token = rec.Token.Token
		}
		if err == nil && token != 0 && rec.Token.Token != token {
			err = in.notHeld(key, opts.Namespace, opts.Strategy, fmt.Sprintf("%s (token %s)", target, token),
				fmt.Sprintf("its token is %s", rec.Token.Token))
		}
		if err == nil && pinned && attrS(cur, attrLife) != life {
			err = in.notHeld(key, opts.Namespace, opts.Strategy, target, "the lock row was deleted and created again")
		}
		if err != nil && len(pending) > 0 {
			// The lease is gone (or was never this one). An attempt of ours may have
			// ended it, its record on the row since replaced by a later force-release:
			// its audit row, written by the same transaction, says so. (None can land
			// any more: each is conditioned on the lease as it was.)
			r, rerr := in.landedAudit(ctx, key, pending)
			if rerr != nil {
				if classify(rerr) == errFatal {
					return nil, forceFailed(key, pending, rerr)
				}
				last = rerr
				continue
			}
			if r != nil {
				return r, nil
			}
		}
		if err != nil {
			return nil, err
		}
		token, life, pinned = rec.Token.Token, attrS(cur, attrLife), true
		audit := item{
			in.names.PartitionKey: s(key), in.names.SortKey: s(auditSK(opts.Namespace, opts.Strategy, now, rec.ID)),
			attrAuditStrategy: s(string(opts.Strategy)), attrAuditNS: s(opts.Namespace),
			attrForcedID: s(rec.ID), attrForcedBy: s(rec.Actor), attrForcedAt: n(now.UnixMilli()),
			attrForcedReason: s(rec.Reason), attrForcedLease: s(rec.LeaseID), attrForcedToken: n(int64(rec.Token.Token)),
		}
		if rec.Owner != "" {
			audit[attrForcedOwner] = s(rec.Owner)
		}
		ae := expr(expression.NewBuilder().WithCondition(expression.AttributeNotExists(name(in.names.PartitionKey))))
		_, err = in.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems: []types.TransactWriteItem{
				{Update: &upd},
				{Put: &types.Put{TableName: aws.String(in.table), Item: audit,
					ConditionExpression: ae.Condition(), ExpressionAttributeNames: ae.Names(), ExpressionAttributeValues: ae.Values()}},
			},
		}, noSDKRetry)
		if err == nil {
			return rec, nil
		}
		last = err
		switch classify(err) {
		case errFatal:
			return nil, forceFailed(key, pending, err)
		case errAmbiguous:
			pending = append(pending, *rec)
		}
		// Condition failed (a heartbeat, a handoff, or an earlier attempt of ours that
		// landed late), throttled or unknown: re-read and decide again. Every attempt
		// carries the same id, so the re-read recognises one that landed (by the row's
		// record, or by the attempt's audit row once a later force-release replaced
		// that), and a late attempt can never land after another one did (the lease it
		// is conditioned on is gone by then).
	}
	return nil, forceFailed(key, pending, fmt.Errorf("gave up after %d attempts: %w", forceAttempts, last))
}

// forceFailed is ForceRelease's error when it stops without an answer. When an attempt
// whose outcome is unknown may have ended the lease, it matches ErrUnknownOutcome too: the
// operator must check the lock (Show: LastForced and Audit) before acting again.
func forceFailed(key string, pending []ForceRecord, err error) error {
	if len(pending) == 0 {
		return fmt.Errorf("lockcore: force-release %q: %w", key, err)
	}
	p := pending[len(pending)-1]
	return fmt.Errorf("lockcore: force-release %q: %w: an attempt (force-release id %s) may have ended lease %s: %w",
		key, ErrUnknownOutcome, p.ID, p.LeaseID, err)
}

// landedAudit looks for the audit row of each attempt in pending (strongly consistent
// reads of its known key) and returns the record of the one that landed (nil: none did).
func (in *Inspector) landedAudit(ctx context.Context, key string, pending []ForceRecord) (*ForceRecord, error) {
	for _, p := range pending {
		it, err := in.get(ctx, in.table, item{in.names.PartitionKey: s(key), in.names.SortKey: s(auditSK(p.Namespace, p.Strategy, p.At, p.ID))})
		if err != nil {
			return nil, err
		}
		if it != nil && attrS(it, attrForcedID) == p.ID {
			r := auditRecord(it, in.names)
			return &r, nil
		}
	}
	return nil, nil
}

// landed completes rec from the row an earlier attempt of this call wrote.
func (in *Inspector) landed(rec *ForceRecord, cur item) *ForceRecord {
	if r := forcedOnRow(cur, in.names, rec.Strategy); r != nil {
		r.Namespace = rec.Namespace
		return r
	}
	return rec
}

func (in *Inspector) notHeld(key, ns string, st Strategy, want, now string) error {
	if want == "" {
		return fmt.Errorf("lockcore: force-release %s %q namespace %q: %w (state %s)", st, key, ns, ErrNotHeld, now)
	}
	return fmt.Errorf("lockcore: force-release %s %q namespace %q: lease %s is not the current lease (%s): %w", st, key, ns, want, now, ErrNotHeld)
}

func (in *Inspector) forceMutex(cur item, rowKey item, target *string, rec *ForceRecord, now time.Time) (types.Update, error) {
	if attrS(cur, attrState) == stateFair {
		return in.forceFairMutex(cur, rowKey, target, rec, now)
	}
	id := attrS(cur, attrLeaseID)
	if cur == nil || attrS(cur, attrState) != stateHeld {
		state := "no lock row"
		if cur != nil {
			state = "released"
		}
		return types.Update{}, in.notHeld(rec.Key, rec.Namespace, rec.Strategy, *target, state)
	}
	if *target != "" && id != *target {
		return types.Update{}, in.notHeld(rec.Key, rec.Namespace, rec.Strategy, *target, "held under lease "+id)
	}
	*target = id
	rev, _ := attrN(cur, attrRev)
	epoch, _ := attrN(cur, attrEpoch)
	fence, _ := attrN(cur, attrFence)
	rec.LeaseID, rec.Owner, rec.Token = id, attrS(cur, attrOwner), fenceInfo(makeFence(epoch, fence))
	cond := expression.And(
		expression.Equal(name(attrLeaseID), value(id)),
		expression.Equal(name(attrRev), value(rev)),
		expression.Equal(name(attrState), value(stateHeld)))
	u := expression.Set(name(attrState), value(stateReleased)).
		Set(name(attrLeaseID), value(forcedLeasePrefix+rec.ID)).
		Set(name(attrPrevLease), value(id)).
		Set(name(attrPrevState), value("forced")).
		Set(name(in.names.TTL), value(ttlSeconds(now.Add(in.retention)))).
		Remove(name(attrUntil)).
		Remove(name(attrData)).
		Add(name(attrRev), value(1)).
		Add(name(attrFence), value(1))
	u = forcedAttrs(u, rec, now)
	return updateOf(in.table, rowKey, expr(expression.NewBuilder().WithCondition(cond).WithUpdate(u))), nil
}

func (in *Inspector) forceTicket(cur item, rowKey item, target *string, rec *ForceRecord, now time.Time) (types.Update, error) {
	row := parseTicketRow(cur, "")
	if !row.exists || row.serving > row.next || !row.servedEntry {
		state := "no lock row"
		if row.exists {
			state = "no ticket served"
		}
		return types.Update{}, in.notHeld(rec.Key, rec.Namespace, rec.Strategy, *target, state)
	}
	id := ticketLeaseID(row.serving)
	if *target != "" && id != *target {
		return types.Update{}, in.notHeld(rec.Key, rec.Namespace, rec.Strategy, *target, "serving "+id)
	}
	*target = id
	rec.LeaseID, rec.Owner, rec.Token = id, "", fenceInfo(makeFence(row.epoch, row.serving))
	wattr := row.waiters[row.serving]
	cond := expression.And( // the served ticket of this life, whatever its heartbeats did
		expression.Equal(name(attrServing), value(row.serving)),
		expression.Equal(name(attrLife), value(row.life)),
		expression.AttributeExists(name(wattr)),
		epochAsRead(row.epoch, row.hasEpoch))
	ttl := ttlSeconds(now.Add(max(in.retention, time.Duration(row.leaseMs)*time.Millisecond+DefaultTTLGrace)))
	u := expression.Set(name(attrServing), value(row.serving+1)).
		Set(name(attrSkip), value(row.serving)).
		Set(name(in.names.TTL), value(ttl)).
		Add(name(attrRev), value(1))
	u = endEntry(u, wattr, true, now) // a tombstone, as a skip leaves (see TicketLock.skip)
	u = forcedAttrs(u, rec, now)
	return updateOf(in.table, rowKey, expr(expression.NewBuilder().WithCondition(cond).WithUpdate(u))), nil
}

// forceFairMutex ends the served ticket of a Mutex row in the ticket format: it skips
// it as a waiter does after a holder stopped heartbeating (serving + 1, its entries
// ended with a tombstone, the next ticket's hand-off recorded without a wall-clock lease
// end).
func (in *Inspector) forceFairMutex(cur item, rowKey item, target *string, rec *ForceRecord, now time.Time) (types.Update, error) {
	row := parseMutexRow(cur, "")
	if !row.busy() || !row.servedEntry {
		return types.Update{}, in.notHeld(rec.Key, rec.Namespace, rec.Strategy, *target, "released")
	}
	h := row.holder()
	id := row.entryID(row.serving)
	if *target != "" && h.LeaseID != *target && *target != ticketLeaseID(row.serving) &&
		(h.Owner != "" || !strings.HasSuffix(*target, nsSeparator+id)) {
		// (Without a recorded owner the holder is "ticket N"; its lease id "<owner>#<id>"
		// names it too. With one it was "ticket N" until its first heartbeat wrote the
		// owner: that id still names it, pinned to one life of the row by the token,
		// which a "ticket N" id requires.)
		return types.Update{}, in.notHeld(rec.Key, rec.Namespace, rec.Strategy, *target, "held under lease "+h.LeaseID)
	}
	*target = h.LeaseID
	rec.LeaseID, rec.Owner, rec.Token = h.LeaseID, h.Owner, fenceInfo(h.Token)
	// The served ticket of this life of the row, whatever its heartbeats did since the
	// read (not the revision: a holder heartbeating faster than an operator's round trip
	// would refuse every attempt).
	cond := expression.And(
		expression.Equal(name(attrState), value(stateFair)),
		expression.Equal(name(attrServing), value(row.serving)),
		expression.Equal(name(attrLife), value(row.life)),
		expression.AttributeExists(name(waiterPrefix+id)),
		epochAsRead(row.epoch, row.hasEpoch))
	ttl := ttlSeconds(now.Add(max(in.retention, h.Lease+DefaultTTLGrace)))
	u := expression.Set(name(attrServing), value(row.serving+1)).
		Set(name(attrSkip), value(row.serving)).
		Set(name(in.names.TTL), value(ttl)).
		Add(name(attrRev), value(1)).
		Set(name(waiterPrefix+id), value(tombstone(now))). // as a skip leaves it (see Mutex.skip)
		Remove(name(detailPrefix + id)).
		Remove(name(attrHOwner)).
		Remove(name(attrHFor)).
		Remove(name(attrHUntil)).
		Remove(name(attrHSince))
	u = forcedAttrs(u, rec, now)
	return updateOf(in.table, rowKey, expr(expression.NewBuilder().WithCondition(cond).WithUpdate(u))), nil
}

// epochAsRead conditions a force-release on the row life's fence epoch being as read.
// The record names the ended lease's token, epoch<<32 | ticket; a holder that had not
// written its life's epoch when the row was read may write it before the transaction
// lands (the epoch is written once, so only its absence can change), and the record
// would then name a token without the epoch, lower than the lease it ended (which
// settling releases, Show and operators compare by token). The condition fails, and
// the next attempt reads the epoch.
func epochAsRead(epoch int64, has bool) expression.ConditionBuilder {
	if !has {
		return expression.AttributeNotExists(name(attrEpoch))
	}
	return expression.Equal(name(attrEpoch), value(epoch))
}

func forcedAttrs(u expression.UpdateBuilder, rec *ForceRecord, now time.Time) expression.UpdateBuilder {
	u = u.Set(name(attrForcedID), value(rec.ID)).
		Set(name(attrForcedBy), value(rec.Actor)).
		Set(name(attrForcedAt), value(now.UnixMilli())).
		Set(name(attrForcedReason), value(rec.Reason)).
		Set(name(attrForcedLease), value(rec.LeaseID)).
		Set(name(attrForcedToken), value(int64(rec.Token.Token)))
	if rec.Owner != "" {
		return u.Set(name(attrForcedOwner), value(rec.Owner))
	}
	return u.Remove(name(attrForcedOwner))
}

func updateOf(table string, key item, e expression.Expression) types.Update {
	return types.Update{
		TableName: aws.String(table), Key: key,
		ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// GuardedWriteError interprets the error of a TransactWriteItems call that carried the
// GuardCheck entry of lease l at index guard. When that entry's condition failed (the
// lease is no longer held: taken over, force-released, expired and removed), it returns
// a *LeaseError matching ErrLeaseLost; any other error is returned unchanged, and nil
// stays nil.
//
//	g, _ := m.GuardCheck(lease)
//	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
//		TransactItems: []types.TransactWriteItem{g, myPut}})
//	if err := lockcore.GuardedWriteError(err, 0, lease); errors.Is(err, lockcore.ErrLeaseLost) { ... }
func GuardedWriteError(err error, guard int, l *Lease) error {
	var tce *types.TransactionCanceledException
	if err == nil || l == nil || !errors.As(err, &tce) || guard < 0 || guard >= len(tce.CancellationReasons) {
		return err
	}
	r := tce.CancellationReasons[guard]
	if aws.ToString(r.Code) != "ConditionalCheckFailed" {
		return err
	}
	cur := holderOf(r.Item)
	switch {
	case attrS(r.Item, attrState) == stateFair:
		cur = parseMutexRow(r.Item, "").holder()
	case leaseStrategy(l.ops) == StrategyTicket: // a TicketLock's row
		if row := parseTicketRow(r.Item, ""); row.servedEntry {
			cur = row.holder()
		}
	}
	return &LeaseError{Op: "guarded write", Key: l.key, LeaseID: l.id, Current: cur, Err: ErrLeaseLost}
}

// Settling a release after a force-release (Mutex and TicketLock share this).
//
// A release whose earlier attempt failed ambiguously, and whose retry finds its ticket
// no longer served, must tell its own landed release from a force-release that ended the
// lease. The row keeps only the last force-release, and later ones replace it: a lease
// force-released, then its successor force-released too, leaves a row that names the
// successor. So each lease remembers the row's last force-release id (forcedId) from a
// state of the row in which its ticket was served (forceMark). Every force-release after
// that state ends the ticket served when it runs: while the ticket is ours, ours. If the
// row still names the same force-release, none ran since, and our ticket can only have
// been passed by our release or by a skip, which no waiter makes while the lease is
// valid (see Mutex and TicketLock: Validity). If it names another one, the release may
// have landed before it or the force-release may have ended us: only a record naming our
// lease settles that, anything else is an unknown outcome.

// forceMark is what a lease saw of the row's force-release record while its ticket was
// served. It is safe for concurrent use (a renewal may record while a release settles).
type forceMark struct {
	mu   sync.Mutex
	seen bool
	id   string // the row's forcedId then ("": none)
}

// see records the force-release record of row, a state in which the lease's ticket was
// served (with its entry).
func (f *forceMark) see(row ticketRow) {
	f.mu.Lock()
	f.seen, f.id = true, row.forcedID
	f.mu.Unlock()
}

// unchanged reports whether row names the same last force-release as a state in which
// the lease's ticket was served: no force-release ran since.
func (f *forceMark) unchanged(row ticketRow) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen && row.forcedID == f.id
}

// releaseSettle is what a release knows when its condition failed: its ticket is no
// longer served.
type releaseSettle struct {
	uncertain bool   // an earlier attempt failed ambiguously: it may have landed
	ticket    int64  // the lease's ticket (0: unknown, a Mutex lease attached with Attach)
	life      string // the row life the ticket belongs to
	leaseID   string
	token     Fence // the lease's fencing token (0: unknown)
	valid     bool  // the lease is still valid by the local clock
	mark      *forceMark
}

type releaseVerdict int

const (
	releaseLost    releaseVerdict = iota // another write passed the ticket: ErrLeaseLost
	releaseLanded                        // an earlier attempt of this release passed it
	releaseUnknown                       // cannot tell: ErrLeaseLost with ErrUnknownOutcome
)

// settleRelease decides a release of a ticket that is no longer served, from the row as
// it is now. Only one write can pass a served ticket (release, skip and force-release are
// all conditioned on it being served), so a row that records the ticket released (rel),
// skipped (skip) or force-released (the last force record) settles it; otherwise see
// forceMark.
func settleRelease(row ticketRow, s releaseSettle) releaseVerdict {
	if !s.uncertain {
		return releaseLost // no attempt of ours can have landed
	}
	same := s.ticket != 0 && row.exists && row.life == s.life
	switch {
	case same && row.rel == s.ticket:
		return releaseLanded
	case same && row.skip == s.ticket:
		return releaseLost
	case row.exists && row.forcedLease != "" && (row.forcedLease == s.leaseID ||
		(same && row.forcedLease == ticketLeaseID(s.ticket)) || (s.token != 0 && row.forcedToken == int64(s.token))):
		return releaseLost // the last force-release ended this lease
	case s.valid && row.exists && (s.ticket == 0 || row.life == s.life) && s.mark != nil && s.mark.unchanged(row):
		return releaseLanded
	}
	return releaseUnknown
}
