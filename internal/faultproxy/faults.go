package faultproxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Fault kinds, as counted in Counts and named in a fault spec (see ParseFaults).
const (
	// KindResetRequest: the connection is closed while the request is on its way, before
	// the engine saw it (TCP level, toxiproxy upstream). The client sees a broken
	// connection and cannot know that nothing was applied.
	KindResetRequest = "reset_request"
	// KindResetResponse: the connection is closed while the response is on its way back,
	// after the engine applied the request (TCP level, toxiproxy downstream): an
	// ambiguous write.
	KindResetResponse = "reset_response"
	// KindDropResponse: the request is forwarded and answered by the engine, then the
	// HTTP layer aborts the client connection without a response: an ambiguous write.
	KindDropResponse = "drop_response"
	// KindThroughputExceeded: HTTP 400 ProvisionedThroughputExceededException, request
	// not forwarded.
	KindThroughputExceeded = "throughput_exceeded"
	// KindThrottling: HTTP 400 ThrottlingException, request not forwarded.
	KindThrottling = "throttling"
	// KindInternalError: HTTP 500 InternalServerError, request not forwarded.
	KindInternalError = "internal_error"
	// KindInternalErrorApplied: HTTP 500 InternalServerError after the engine applied
	// the request (the engine's answer is discarded): an ambiguous write.
	KindInternalErrorApplied = "internal_error_applied"
	// KindStall: the request is held for Faults.StallFor before it is forwarded, even if
	// the client gave up meanwhile, so a write can land after its caller saw a timeout.
	KindStall = "stall"
	// KindBlackout: the request is applied and its response dropped (as drop_response),
	// then every request is refused unforwarded for BlackoutFor: a client cut off right
	// after its write landed, so that its re-reads and retries fail too (an ambiguous
	// write nobody can settle in time, and a retry that lands after the blackout).
	KindBlackout = "blackout"
	// KindLate: the client's connection is aborted at once, without a response, and the
	// request is held and forwarded to the engine after a random delay of up to
	// Faults.LateFor: a request that lands long after its caller gave up on it — after
	// the SDK's retry of it landed, and possibly after the caller's whole acquire,
	// write and release (a late copy).
	KindLate = "late"
	// KindStaleRead: an eventually consistent GetItem is answered with a state its item
	// had up to Faults.StaleFor earlier (the proxy records the state every write leaves,
	// see stale.go), as a lagging replica would: a view of the item as it was before
	// writes that have completed since. Queries and Scans get an earlier answer to the
	// same request. Drawn per eventually consistent read that has such an earlier state
	// (independently of the other kinds, which take precedence); DynamoDB Local's own
	// eventually consistent reads are consistent.
	KindStaleRead = "stale_read"
)

// BlackoutFor is how long a blackout refuses every request: longer than the SDK's read
// retries (3 attempts, 500 ms backoff at most, in the chaos and test clients).
const BlackoutFor = 1500 * time.Millisecond

// Kinds lists every fault kind in a stable order.
var Kinds = []string{
	KindResetRequest, KindResetResponse, KindDropResponse, KindThroughputExceeded,
	KindThrottling, KindInternalError, KindInternalErrorApplied, KindStall, KindBlackout,
	KindLate, KindStaleRead,
}

// Faults is the fault mix of a proxy: a latency added to every response and, per
// request, the probability of each discrete fault kind.
type Faults struct {
	Latency time.Duration // added to every response chunk (toxiproxy latency toxic)
	Jitter  time.Duration // ± uniformly around Latency

	// Rates in [0, 1] by kind (Kind* constants). The HTTP-level kinds are exclusive per
	// request (their sum must not exceed 1); the TCP-level resets are drawn per chunk
	// of data, independently.
	Rates map[string]float64

	// StallFor is how long a stalled request is held (default 1.5s).
	StallFor time.Duration
	// LateFor is the longest a late request is held (default 4s; each draws a delay
	// uniformly up to it).
	LateFor time.Duration
	// StaleFor is how old an answer a stale read may get (default 1s).
	StaleFor time.Duration
}

// Defaults of Faults.LateFor and Faults.StaleFor.
const (
	DefaultLate  = 4 * time.Second
	DefaultStale = time.Second
)

// withDefaults fills in the zero durations.
func (f Faults) withDefaults() Faults {
	if f.StallFor == 0 {
		f.StallFor = DefaultStall
	}
	if f.LateFor == 0 {
		f.LateFor = DefaultLate
	}
	if f.StaleFor == 0 {
		f.StaleFor = DefaultStale
	}
	return f
}

// DefaultStall is the default Faults.StallFor.
const DefaultStall = 1500 * time.Millisecond

// NoFaults passes everything through untouched.
func NoFaults() Faults { return Faults{Rates: map[string]float64{}} }

// AllFaults is every fault kind on, at rates that make about one request in twenty
// fail one way or another: the mix of `make chaos`. Half the eventually consistent reads
// are stale (a stale answer is no failure, and DynamoDB may give one any time): at 0.1,
// 3 of 6 three-minute runs found a reverted TicketLock stale-view fix; at 0.5, 2 of 2.
func AllFaults() Faults {
	return Faults{
		Latency:  3 * time.Millisecond,
		Jitter:   3 * time.Millisecond,
		StallFor: DefaultStall,
		LateFor:  DefaultLate,
		StaleFor: DefaultStale,
		Rates: map[string]float64{
			KindResetRequest:         0.006,
			KindResetResponse:        0.006,
			KindDropResponse:         0.008,
			KindThroughputExceeded:   0.008,
			KindThrottling:           0.008,
			KindInternalError:        0.006,
			KindInternalErrorApplied: 0.006,
			KindStall:                0.002,
			KindBlackout:             0.001,
			KindLate:                 0.002,
			KindStaleRead:            0.5,
		},
	}
}

// ParseFaults reads a fault spec: comma-separated items, each a preset ("all", "none")
// or key=value, applied left to right. Keys are the Kind* names (value: a rate in
// [0,1]), "latency", "jitter" and "stall_for" (value: a Go duration), or "scale" (value:
// a factor multiplying every rate set so far), "late_for", "stale_for" (durations).
// Examples:
//
//	all
//	none,throttling=0.05,latency=10ms
//	all,scale=2,stall=0
func ParseFaults(spec string) (Faults, error) {
	f := NoFaults().withDefaults()
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return f, nil
	}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		k, v, hasValue := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		v = strings.TrimSpace(v)
		switch {
		case !hasValue && k == "all":
			f = AllFaults()
		case !hasValue && k == "none":
			f = NoFaults().withDefaults()
		case !hasValue:
			return Faults{}, fmt.Errorf("fault spec: %q: want a preset (all, none) or key=value", item)
		case k == "latency" || k == "jitter" || k == "stall_for" || k == "late_for" || k == "stale_for":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return Faults{}, fmt.Errorf("fault spec: %s: want a non-negative duration, got %q", k, v)
			}
			switch k {
			case "latency":
				f.Latency = d
			case "jitter":
				f.Jitter = d
			case "late_for":
				f.LateFor = d
			case "stale_for":
				f.StaleFor = d
			default:
				f.StallFor = d
			}
		case k == "scale":
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 {
				return Faults{}, fmt.Errorf("fault spec: scale: want a non-negative number, got %q", v)
			}
			for kind, r := range f.Rates {
				f.Rates[kind] = r * x
			}
		case slices.Contains(Kinds, k):
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || x < 0 || x > 1 {
				return Faults{}, fmt.Errorf("fault spec: %s: want a rate in [0,1], got %q", k, v)
			}
			f.Rates[k] = x
		default:
			return Faults{}, fmt.Errorf("fault spec: unknown key %q (kinds: %s; or latency, jitter, stall_for, late_for, stale_for, scale)",
				k, strings.Join(Kinds, ", "))
		}
	}
	return f, f.Validate()
}

// httpKinds are the kinds decided by the HTTP layer, one draw per request.
var httpKinds = []string{
	KindDropResponse, KindThroughputExceeded, KindThrottling, KindInternalError,
	KindInternalErrorApplied, KindStall, KindBlackout, KindLate,
}

// Validate checks rates and durations.
func (f Faults) Validate() error {
	sum := 0.0
	for k, r := range f.Rates {
		if !slices.Contains(Kinds, k) {
			return fmt.Errorf("faults: unknown kind %q", k)
		}
		if r < 0 || r > 1 {
			return fmt.Errorf("faults: %s rate %v not in [0,1]", k, r)
		}
		if slices.Contains(httpKinds, k) {
			sum += r
		}
	}
	if sum > 1 {
		return fmt.Errorf("faults: HTTP-level rates add up to %v > 1", sum)
	}
	if f.Latency < 0 || f.Jitter < 0 || f.StallFor < 0 || f.LateFor < 0 || f.StaleFor < 0 {
		return fmt.Errorf("faults: negative duration")
	}
	return nil
}

// String renders the mix as a spec ParseFaults accepts.
func (f Faults) String() string {
	parts := []string{"none"}
	if f.Latency > 0 {
		parts = append(parts, "latency="+f.Latency.String())
	}
	if f.Jitter > 0 {
		parts = append(parts, "jitter="+f.Jitter.String())
	}
	for _, k := range Kinds {
		if r := f.Rates[k]; r > 0 {
			parts = append(parts, fmt.Sprintf("%s=%g", k, r))
		}
	}
	if f.Rates[KindStall] > 0 {
		parts = append(parts, "stall_for="+f.StallFor.String())
	}
	if f.Rates[KindLate] > 0 && f.LateFor > 0 {
		parts = append(parts, "late_for="+f.LateFor.String())
	}
	if f.Rates[KindStaleRead] > 0 && f.StaleFor > 0 {
		parts = append(parts, "stale_for="+f.StaleFor.String())
	}
	return strings.Join(parts, ",")
}

// Scaled returns a copy with every rate multiplied by x (capped at 1).
func (f Faults) Scaled(x float64) Faults {
	out := f
	out.Rates = make(map[string]float64, len(f.Rates))
	for k, r := range f.Rates {
		out.Rates[k] = min(1, r*x)
	}
	return out
}
