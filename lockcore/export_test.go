package lockcore

import "sync"

// WithAfterTicketHook lets tests delay a FIFO waiter between taking its ticket and
// looking at the queue (the window of the published design's race).
func WithAfterTicketHook(f func(key string, ticket int64)) Option {
	return func(c *config) error { c.hooks.afterTicket = f; return nil }
}

// WithBeforeIssueHook lets tests delay a FIFO waiter between taking its place in line
// and sending the transaction that tries to issue that number.
func WithBeforeIssueHook(f func(key string, ticket int64)) Option {
	return func(c *config) error { c.hooks.beforeIssue = f; return nil }
}

// WithRowBudget makes a Mutex reason about room in its rows as if DynamoDB's item size
// limit were n bytes (the engine's own limit is unchanged).
func WithRowBudget(n int) Option {
	return func(c *config) error { c.hooks.rowBytes = n; return nil }
}

// WithEntryIDs makes a TicketLock draw its entry ids from ids, in order (then at
// random), so that a test can give two takes the same id.
func WithEntryIDs(ids ...string) Option {
	return func(c *config) error {
		var mu sync.Mutex
		c.hooks.entryID = func() string {
			mu.Lock()
			defer mu.Unlock()
			if len(ids) == 0 {
				return compactID()
			}
			id := ids[0]
			ids = ids[1:]
			return id
		}
		return nil
	}
}

// WithWaitRoomHook runs f when a Mutex take waits for room in a full row.
func WithWaitRoomHook(f func(key string)) Option {
	return func(c *config) error { c.hooks.waitRoom = f; return nil }
}

// HoldsKnown is how many locks an ItemLocker remembers a hold time for (its pacing: the
// turn its waiters plan with).
func HoldsKnown(il *ItemLocker) int {
	il.pacing.mu.Lock()
	defer il.pacing.mu.Unlock()
	return len(il.pacing.hold)
}
