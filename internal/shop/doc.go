// Package shop is the domain of the SAM application: orders that reserve stock and stock
// adjustments, made correct under concurrent, duplicated and crashing Lambda invocations
// by turnstile's locks (lockcore).
//
// Tables (template.yaml):
//
//	OrdersTable     orderId                  the order: customerId, lines, status, reason
//	                                         (written by its decision)
//	InventoryTable  pk "SKU#<sku>", sk "STOCK"        available, reserved, the lock's
//	                                                  attributes (lockcore's locking read),
//	                                                  and "po#<order>": orders recorded for
//	                                                  the lock's holder to decide, or the
//	                                                  marker of their decision ("=R", "=J")
//	                pk "SKU#<sku>", sk "ADJ#<id>"     adjustment marker (TTL expiresAt): delta when
//	                                                  applied; outcome REJECTED, requestedDelta
//	                                                  and the available stock seen when rejected
//	LockTable       pk "sku#<sku>", sk "lock"          the legacy mode's SKU locks (lockcore Mutex)
//
// A SKU's lock is lockcore's locking read on its stock item (ItemLocker): one UpdateItem
// takes the lock and returns the stock. The orders of every invocation waiting for a
// stock item are recorded on it, and its holder decides them all in one transaction that
// writes each order's decision (conditioned on the order not being decided yet), the
// reservations, and releases the item (conditioned on the lease: a holder that lost it,
// paused or partitioned or presumed dead, writes nothing). A redelivered message finds its
// order decided and changes nothing. See ProcessOrders.
//
// Operations wait for contended locks within the invocation (the locks are fair: a
// waiter's turn comes) until SafetyMargin before the deadline, instead of returning the
// message to SQS after a second. Leases are taken over by observation (lockcore's
// default): a waiter takes a dead holder's lease after watching it unchanged for its
// full length, which the deadline-derived waits are long enough for; the janitor's sweep
// finds the abandoned stock locks nobody waits for (AbandonedStock). WithLegacyWait
// restores the order path of before (orders one by one, lock-table SKU locks, a 1s wait
// then a bounce) for comparison.
package shop
