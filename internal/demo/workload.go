package demo

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

// The catalogue: hot SKUs (a flash sale) draw most of the demand and run short; regular
// SKUs are stocked generously.
var (
	hotNames = []string{
		"CONSOLE-X-1TB", "GPU-RTX-5090", "SNEAKER-AIR-42", "TICKET-GA-FRI",
		"PHONE-PRO-256", "LEGO-FALCON-75", "WATCH-ULTRA-2", "DRONE-MINI-4",
	}
	regularNames = []string{
		"MUG-RED-350", "TEE-BLK-M", "SOCKS-WOOL-L", "CABLE-USBC-2M", "BOOK-GO-101",
	}
)

// MaxHotSKUs is the largest -hot-skus value.
var MaxHotSKUs = len(hotNames)

// workload is one deterministic scenario: the catalogue with its initial stock, the
// orders (some sent twice by the producer, some delivered twice by the queue), the stock
// adjustments (some delivered twice by EventBridge) and when each is sent.
type workload struct {
	hot, regular []string
	spare        []string // one SKU per crash order, wanted by no other order
	initial      map[string]int
	orders       []plannedOrder
	adjustments  []plannedAdjustment
	poison       []plannedPoison
	// sendOver is how long the producers take to send everything.
	sendOver time.Duration
}

type plannedOrder struct {
	order        shop.Order
	at           time.Duration // send time from the start
	sentTwice    bool          // the producer retried the send: two messages
	retryAfter   time.Duration // when the producer's retry is sent, after the first
	deliverTwice bool          // the queue delivers the (first) message twice
	crash        bool          // its first receive is by an environment that dies holding its locks
}

// plannedPoison is a malformed message: it fails every receive and must end in the
// dead-letter queue after maxReceiveCount receives.
type plannedPoison struct {
	body string
	at   time.Duration
}

// poisonBodies are the malformed messages, one per kind of mistake.
var poisonBodies = []string{
	`{"orderId":"bad-%d","customerId":"c","lines":[{"sku":"MUG-RED-350","qty":0}]}`,
	`{"orderId":"bad-%d","customerId":"c","lines":[{"sku":"MUG-RED-350","quantity":1}]}`,
	`{"orderId":"bad-%d","customerId":"c","lines":[]}`,
	`not json %d`,
}

type plannedAdjustment struct {
	adj   shop.Adjustment
	at    time.Duration
	twice bool // EventBridge delivers the event twice
}

func (w *workload) skus() []string {
	return append(append(append([]string{}, w.hot...), w.regular...), w.spare...)
}

// newWorkload plans orders orders, crashes of them crash orders: each of those wants one
// spare-part SKU of its own, so that no other order waits for the locks its dead holder
// abandons and takes them over (observation takeover: any waiter would, after one lease)
// before TTL removes them and the janitor finds them. poison malformed messages are sent
// during the burst.
func newWorkload(seed uint64, orders, hotSKUs, crashes, poison int) *workload {
	rng := rand.New(rand.NewPCG(seed, 0x7475726e7374696c)) // "turnstil"
	w := &workload{
		hot:     append([]string{}, hotNames[:hotSKUs]...),
		regular: append([]string{}, regularNames...),
		initial: map[string]int{},
		// A flash sale: the orders arrive in a burst (300 in under a second).
		sendOver: time.Duration(min(max(orders, 40), 1000)) * 3 * time.Millisecond,
	}
	demand := map[string]int{}
	regularOrders := orders - crashes
	for i := 0; i < regularOrders; i++ {
		nLines := pick(rng, []int{1, 1, 1, 1, 1, 2, 2, 2, 3, 3})
		seen := map[string]bool{}
		var lines []shop.Line
		for len(lines) < nLines {
			var sku string
			if rng.Float64() < 0.7 {
				sku = w.hot[rng.IntN(len(w.hot))]
			} else {
				sku = w.regular[rng.IntN(len(w.regular))]
			}
			if seen[sku] {
				continue
			}
			seen[sku] = true
			qty := pick(rng, []int{1, 1, 1, 1, 1, 1, 2, 2, 2, 3})
			lines = append(lines, shop.Line{SKU: sku, Qty: qty})
			demand[sku] += qty
		}
		at := time.Duration(float64(w.sendOver) * float64(i) / float64(regularOrders))
		w.orders = append(w.orders, plannedOrder{
			order: shop.Order{
				OrderID:    fmt.Sprintf("ord-%05d", i+1),
				CustomerID: fmt.Sprintf("cust-%04d", 1+rng.IntN(max(orders/3, 1))),
				Lines:      lines,
			},
			at:           at,
			sentTwice:    rng.Float64() < 0.08,
			retryAfter:   time.Duration(50+rng.IntN(250)) * time.Millisecond,
			deliverTwice: rng.Float64() < 0.05,
		})
	}
	// The crash orders, early in the burst (a bad deploy, a host failure): their
	// recoveries overlap.
	for k := 0; k < crashes; k++ {
		f := 0.1
		if crashes > 1 {
			f += 0.1 * float64(k) / float64(crashes-1)
		}
		sku := fmt.Sprintf("SPARE-PART-%d", k+1)
		w.spare = append(w.spare, sku)
		w.initial[sku] = 5
		w.orders = append(w.orders, plannedOrder{
			order: shop.Order{OrderID: fmt.Sprintf("ord-crash-%d", k+1), CustomerID: "cust-crash",
				Lines: []shop.Line{{SKU: sku, Qty: 1}}},
			at: time.Duration(f * float64(w.sendOver)), crash: true,
		})
	}
	for k := 0; k < poison; k++ {
		w.poison = append(w.poison, plannedPoison{
			body: fmt.Sprintf(poisonBodies[k%len(poisonBodies)], k+1),
			at:   time.Duration(float64(w.sendOver) * float64(k+1) / float64(poison+1)),
		})
	}
	// Hot SKUs get about 60% of their demand, regular ones 150%: the sale sells out.
	for _, s := range w.hot {
		w.initial[s] = max(demand[s]*6/10, 3)
	}
	for _, s := range w.regular {
		w.initial[s] = max(demand[s]*15/10, 5)
	}
	// Adjustments: restocks of hot SKUs, shrinkage (damaged goods) of regular ones, and a
	// few stock count corrections larger than what is there, which must be rejected.
	nAdj := max(orders/10, 4)
	adjustOver := max(w.sendOver, 10*time.Second)
	for i := 0; i < nAdj; i++ {
		var a shop.Adjustment
		a.AdjustmentID = fmt.Sprintf("adj-%04d", i+1)
		switch r := rng.Float64(); {
		case r < 0.6:
			a.SKU = w.hot[rng.IntN(len(w.hot))]
			a.Delta = 2 + rng.IntN(9)
			a.Reason = "restock: supplier delivery"
		case r < 0.9:
			a.SKU = w.regular[rng.IntN(len(w.regular))]
			a.Delta = -(1 + rng.IntN(3))
			a.Reason = "shrinkage: damaged in warehouse"
		default:
			a.SKU = w.hot[rng.IntN(len(w.hot))]
			a.Delta = -(w.initial[a.SKU] + 5 + rng.IntN(10))
			a.Reason = "stock count correction"
		}
		// The warehouse's events trickle in while the burst of orders is worked off.
		at := time.Duration(float64(adjustOver) * (0.1 + 0.8*float64(i)/float64(nAdj)))
		if a.Reason == "stock count correction" {
			at = 0 // the morning's stock count, before the rush
		}
		w.adjustments = append(w.adjustments, plannedAdjustment{adj: a, at: at, twice: rng.Float64() < 0.15})
	}
	return w
}

func pick(rng *rand.Rand, from []int) int { return from[rng.IntN(len(from))] }

// wanting counts the orders that want sku.
func (w *workload) wanting(sku string) int {
	n := 0
	for _, o := range w.orders {
		for _, l := range o.order.Lines {
			if l.SKU == sku {
				n++
				break
			}
		}
	}
	return n
}

// hottest returns the SKU the most orders want (the first hot SKU on a tie): the one
// whose lock's critical section the report times.
func (w *workload) hottest() string {
	best, most := "", -1
	for _, sku := range append(append([]string{}, w.hot...), w.regular...) {
		if n := w.wanting(sku); n > most {
			best, most = sku, n
		}
	}
	return best
}
