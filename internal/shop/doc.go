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
// Leases are taken over by wall clock (lockcore.WallClockTakeover, see WithTakeoverSkew):
// a Lambda invocation never waits long enough to observe a dead lease for its full
// length, and AWS hosts' clocks are synchronised far better than the default 2s
// allowance.
package shop
