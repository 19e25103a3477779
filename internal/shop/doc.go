// Package shop is the domain of the SAM application: orders that reserve stock and stock
// adjustments, made correct under concurrent, duplicated and crashing Lambda invocations
// by turnstile's locks (lockcore).
//
// Tables (template.yaml):
//
//	OrdersTable     orderId                  the order: customerId, lines, status, reason,
//	                                         and the locking-read attributes while locked
//	InventoryTable  pk "SKU#<sku>", sk "STOCK"        available, reserved, fence
//	                pk "SKU#<sku>", sk "ADJ#<id>"     adjustment marker (TTL expiresAt): delta when
//	                                                  applied; outcome REJECTED, requestedDelta
//	                                                  and the available stock seen when rejected
//	LockTable       pk "sku#<sku>", sk "lock"          lockcore Mutex rows; data = order id
//
// An order is locked with a locking read on its own item (lockcore.ItemLocker); its SKUs
// with lockcore.Mutex.AcquireAll on the lock table, the lock stock adjustments take too.
// Every write of a decision is one transaction guarded by every lease involved, so a
// holder that lost a lease (paused, partitioned, presumed dead) cannot write, and a
// redelivered message finds the order final and changes nothing.
//
// Operations wait for contended locks within the invocation (the locks are fair: a
// waiter's turn comes) until SafetyMargin before the deadline, instead of returning the
// message to SQS after a second. Leases are taken over by observation (lockcore's
// default): a waiter takes a dead holder's lease after watching it unchanged for its
// full length, which the deadline-derived waits are long enough for. ProcessOrders
// decides a whole SQS batch under one acquisition of each SKU it needs.
// WithLegacyWait restores the old 1s-then-bounce behaviour for comparison.
package shop
