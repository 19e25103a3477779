package lockcore

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

// WithWaitRoomHook runs f when a Mutex take waits for room in a full row.
func WithWaitRoomHook(f func(key string)) Option {
	return func(c *config) error { c.hooks.waitRoom = f; return nil }
}
