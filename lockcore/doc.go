// Package lockcore provides concurrency control for many AWS Lambda functions (or any
// processes) working on the same Amazon DynamoDB items. DynamoDB has no row locks and its
// transactions only detect interference; lockcore builds leases, fair queues and
// optimistic updates from conditional writes, correct under contention, crashed and
// paused holders, clock skew and ambiguous network errors.
//
// # Choosing a strategy
//
//   - ItemLocker (locking read): the lock lives on the data item. Acquire locks and
//     reads in one UpdateItem; UpdateAndRelease writes and unlocks in one more. Two
//     calls per critical section, and the write is self-fencing. It is fair: a ticket
//     lock on the item (a ticket counter, a now-serving counter and one short entry per
//     waiter) lets waiters in strictly in arrival order; a waiter's turn comes with the
//     read that shows it, so a contended section costs two writes plus a few polls. Use
//     it whenever the protected data is one item — it is the cheapest lock. Takeover by
//     observation or by wall clock.
//   - Mutex (fair lease mutex): a lock row in a separate lock table, for protecting
//     anything (several items, other tables, external systems). Waiters enter in arrival
//     order (the row is a ticket lock that also records each ticket's owner, lease and
//     data). Two calls per uncontended critical section, two writes plus a few reads per
//     contended one; guard your writes with GuardCheck (in a transaction) or with
//     FenceCondition on the data. Both takeover modes.
//   - TicketLock (fair ticket lock): waiters enter strictly in arrival order, and the
//     whole queue is one row (a ticket counter and a now-serving counter). Two writes per
//     critical section plus a few one-RCU reads timed by queue position, however many
//     wait. Use it on hot keys: it is the fairest and, under contention, the cheapest
//     lock. Takeover is by observation only.
//     A crashed or frozen waiter's ticket is skipped a full lease after it is served, so
//     K of them ahead of a waiter delay it by about K leases (the same holds for the Mutex
//     and the ItemLocker, whose lines are ticket lines too).
//   - Queue (FIFO ticket queue with a row per waiter): waiters enter strictly in arrival
//     order, and each waiter's row is visible (owner, heartbeat) while it waits, so a
//     crashed waiter is evicted after its own lease rather than when its turn comes. It
//     costs a write (a place in line) and a transaction to enqueue and a Query per poll
//     (of at most four rows from the head of the queue up to the waiter's own; all of
//     them once a lease, to watch for dead waiters).
//   - Versioned (optimistic): no lock; writes conditioned on the version read, retried
//     with a merge function. Best when conflicts are rare.
//   - Mutex.AcquireAll (multi-key): several keys all-or-nothing, in canonical order, so
//     overlapping sets never deadlock.
//
// # Safety
//
// Every acquisition has a unique lease id (owner name + random); releases, renewals and
// guarded writes are conditioned on it (ItemLocker and Queue also on the owner name the
// item or row records; a Mutex client refuses, before any write, a lease id that names
// another owner), so no client can release, renew or overwrite another owner's lease
// (ErrNotOwner). A holder that loses its lease
// learns it from its heartbeat (Lease.Done, Lease.Err) and from every guarded write
// (ErrLeaseLost). Every acquisition also carries a fencing token (Lease.Token). For
// Mutex, TicketLock and Queue it strictly increases per key (and namespace) for the
// key's whole life, even after its lock row was deleted by TTL. For ItemLocker it is the
// acquisition's ticket in the data item's life plus the life's epoch, the time the life
// began: it strictly increases while the item exists, and across its deletions as long as
// the wall clocks of the clients that lock it agree (ItemLease.Token); its own writes are
// fenced by the lease itself.
//
// Wall clocks are never trusted for safety in the default mode, except for that order of
// an ItemLocker's tokens across its item's deletions. TTLs of lock rows count
// from the later of the local clock and DynamoDB's own clock (the Date header of its
// responses), so a holder whose clock runs slow cannot have its live row removed by TTL
// (see WithTTLGrace for the bound).
//
// Item writes under a locking read (ItemLocker.Update, UpdateAndRelease) are applied at
// most once: each names the write it follows, so a retried or late duplicate of a
// landed write fails its condition and is recognised.
//
// A lock's own writes must fit DynamoDB's item size limit (400 KB). A Mutex keeps 2 KiB
// of its row free (waiters wait for room); an ItemLocker keeps 2 KiB of the data item
// free for its holders' lock attributes: a waiter that would leave less, or a holder's
// write that would, fails with ErrItemTooLarge (nothing written, a lease kept), and a
// waiter handed an item that other writers filled holds it by its ticket, never losing a
// lease that nobody else took for want of room.
//
// Takeover of an abandoned lease is decided, by default, by observation
// (ObserveTakeover): a waiter takes over only after seeing the same lease version
// unchanged for a full lease on its own monotonic clock, so wall-clock skew cannot make
// it steal a live lease. WallClockTakeover(skew) trusts wall clocks within an explicit
// allowance and takes over faster when a waiter arrives late.
//
// Writes whose outcome is unknown (a timeout or 5xx after the request may have landed)
// are never retried blindly: lockcore turns off the SDK's retries for its conditional
// writes, re-reads, and recognises its own lease id. A client that gives up while such
// a write may still land releases it on its way out.
//
// # Waiting
//
// Acquire waits as its WaitPolicy says: NoWait, WaitUpTo(d) or WaitForever (the
// default, bounded by the context). Waiters of every lock (Mutex, TicketLock, Queue,
// ItemLocker) time their reads by queue position and the queue's measured pace; a Mutex
// waiting on a row of the previous release, and retries after refused or failed calls,
// back off exponentially with full jitter, capped (WithBackoff). All wake exactly when a
// takeover becomes possible. A context deadline always wins. A waiter whose queue
// stands still reads less and less often, but at least ten times a lease;
// MinPollInterval(d) puts a floor under the reads of one acquisition, for callers to
// whom a late turn costs less than the reads.
//
// # Tables
//
// Mutex, TicketLock and Queue use a lock table with string keys "pk" and "sk" and the TTL attribute
// "expiresAt" (see CreateLockTable, which also shows it in CloudFormation); other names are
// set with WithTableAttributes (and InspectTableAttributes, WithAttributes for the Inspector
// and CreateLockTable). ItemLocker and Versioned work on any table.
package lockcore
