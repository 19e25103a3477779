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
