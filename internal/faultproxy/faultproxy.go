// Package faultproxy is a fault-injecting loopback proxy between DynamoDB clients and a
// local engine (DynamoDB Local), for chaos tests.
//
//	client ──► toxiproxy (TCP) ──► HTTP fault layer ──► engine
//
// Two layers, because the faults live at two levels:
//
//   - TCP, in front: Shopify's toxiproxy, used as a Go library (github.com/Shopify/toxiproxy/v2).
//     Its stock "latency" toxic adds latency and jitter to every response. Connection
//     resets use a small toxic of ours ("turnstile_reset") registered in toxiproxy's
//     toxic registry, its documented extension point, and run on toxiproxy's link
//     pipeline: toxiproxy's own reset_peer decides once per connection (with the
//     unseedable global math/rand) and fires on the first chunk, so on the client's
//     keep-alive connections it would hit only the first request of each and could not
//     be counted; ours decides per chunk of data, from the proxy's seeded generator, and
//     counts. Upstream (request on its way: never reached the engine) and downstream
//     (response on its way: the write landed) resets are counted separately. Ours ends
//     the connection with a close, so the client reads EOF; toxiproxy sets SO_LINGER 0
//     (a true RST) only for its built-in toxic type. Either way the client sees a broken
//     connection without a response, which is the fault that matters.
//   - HTTP, behind it: DynamoDB-level faults need to understand requests and responses,
//     which toxiproxy (a byte pipe) cannot. This layer is hand-rolled on
//     net/http/httputil.ReverseProxy, because no maintained Go library injects DynamoDB
//     error responses: throttling answers (HTTP 400 with the engine's JSON error shape
//     and the right __type, ProvisionedThroughputExceededException or
//     ThrottlingException), HTTP 500 before the request is forwarded, HTTP 500 after the
//     engine applied it, responses dropped after the engine applied the request
//     (the connection is aborted: an ambiguous write), and stalls that hold a request
//     and forward it even if the client gave up meanwhile (a write landing after its
//     caller timed out), and late requests, whose caller gets no answer at once and
//     which land up to seconds later (after the SDK's retry, possibly after the caller's
//     whole critical section). One seeded draw per request picks at most one of these.
//     Besides, an eventually consistent read may get a stale answer: a state its item
//     had up to a second earlier, as recorded after each write (DynamoDB Local's
//     eventually consistent reads are consistent, so without this nothing would test a
//     waiter acting on an old view).
//
// Every fault is counted by kind (Counts). The seed fixes the stream of fault decisions;
// which request meets which decision still depends on timing and goroutine scheduling,
// so a run cannot be replayed exactly, and toxiproxy's latency jitter uses its own
// unseeded generator.
//
// Requests that reach the HTTP layer are always carried through to the engine, even when
// the client disconnects, as a real server would; Close waits for them, so that after
// Close nothing more lands on the engine.
package faultproxy

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a running fault proxy.
type Proxy struct {
	inj      *injector
	target   *url.URL
	late     sync.WaitGroup // late requests not yet forwarded
	lateHTTP *http.Client
	tox      *toxiproxy.Proxy
	srv      *http.Server
	srvDone  chan struct{}
	endpoint string
	closing  chan struct{}
	once     sync.Once
	closeErr error
}

// Start starts a proxy for the engine at upstream (an http:// URL) on free loopback
// ports. Clients use Endpoint.
func Start(upstream string, seed uint64, f Faults) (*Proxy, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	f = f.withDefaults()
	target, err := url.Parse(upstream)
	if err != nil || target.Scheme != "http" || target.Host == "" {
		return nil, fmt.Errorf("faultproxy: upstream %q: want http://host:port", upstream)
	}
	inj := newInjector(seed, f)
	p := &Proxy{inj: inj, target: target, closing: make(chan struct{}), srvDone: make(chan struct{}),
		lateHTTP: &http.Client{Timeout: 30 * time.Second}}

	// HTTP fault layer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   64,
			ResponseHeaderTimeout: 30 * time.Second,
		},
		ModifyResponse: func(resp *http.Response) error {
			if c, ok := resp.Request.Context().Value(captureKey{}).(capture); ok && resp.StatusCode == http.StatusOK {
				// An eventually consistent read: keep its answer for later stale reads.
				b, err := io.ReadAll(io.LimitReader(resp.Body, maxCaptured+1))
				_ = resp.Body.Close()
				if err != nil {
					return err
				}
				resp.Body = io.NopCloser(bytes.NewReader(b))
				if len(b) <= maxCaptured {
					inj.stale.record(c.shape, c.sent, resp.Header, b, inj.faults.Load().StaleFor)
				}
			}
			switch kindOf(resp.Request.Context()) {
			case KindDropResponse, KindBlackout:
				return errDropResponse
			case KindInternalErrorApplied:
				return errInternalApplied
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			switch {
			case errors.Is(err, errDropResponse):
				// Abort the client connection without a response; net/http recovers
				// this panic silently and closes the connection.
				panic(http.ErrAbortHandler)
			case errors.Is(err, errInternalApplied):
				writeAPIError(w, http.StatusInternalServerError, typeInternalServerError, "Internal server error")
			default:
				writeAPIError(w, http.StatusBadGateway, typeInternalServerError, "faultproxy: engine unreachable: "+err.Error())
			}
		},
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serve(w, r, rp) }),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          discardLogger(),
	}
	go func() {
		defer close(p.srvDone)
		_ = p.srv.Serve(ln)
	}()

	// TCP layer: toxiproxy in front of the HTTP layer.
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	tox := toxiproxy.NewProxy(server, "ddb-"+inj.id, "127.0.0.1:0", ln.Addr().String())
	if err := tox.Start(); err != nil {
		_ = p.srv.Close()
		unregister(inj.id)
		return nil, fmt.Errorf("faultproxy: start toxiproxy: %w", err)
	}
	p.tox = tox
	toxicsJSON := []string{
		fmt.Sprintf(`{"name":"latency","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":%d,"jitter":%d}}`,
			f.Latency.Milliseconds(), f.Jitter.Milliseconds()),
		fmt.Sprintf(`{"name":"%s","type":"%s","stream":"upstream","toxicity":1,"attributes":{"injector":%q,"kind":%q}}`,
			KindResetRequest, resetToxicType, inj.id, KindResetRequest),
		fmt.Sprintf(`{"name":"%s","type":"%s","stream":"downstream","toxicity":1,"attributes":{"injector":%q,"kind":%q}}`,
			KindResetResponse, resetToxicType, inj.id, KindResetResponse),
	}
	for _, j := range toxicsJSON {
		if _, err := tox.Toxics.AddToxicJson(strings.NewReader(j)); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("faultproxy: add toxic %s: %w", j, err)
		}
	}
	p.endpoint = "http://" + tox.Listen
	return p, nil
}

// Endpoint is the URL clients use (the toxiproxy listener).
func (p *Proxy) Endpoint() string { return p.endpoint }

// Faults returns the current fault mix.
func (p *Proxy) Faults() Faults { return *p.inj.faults.Load() }

// SetFaults replaces the fault mix of a running proxy (say, NoFaults for a phase that
// must not be disturbed). Latency and jitter keep the values given to Start.
func (p *Proxy) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	f = f.withDefaults()
	p.inj.faults.Store(&f)
	return nil
}

// Counts returns how many faults of each kind were injected so far (every kind is
// present, zero or not).
func (p *Proxy) Counts() map[string]int64 { return p.inj.snapshot() }

// Requests returns how many requests reached the HTTP layer.
func (p *Proxy) Requests() int64 { return p.inj.requests.Load() }

// Close stops accepting connections, breaks the open ones, and waits (up to 30s) until
// every request that reached the HTTP layer has been answered by the engine, so that
// nothing lands on the engine after Close returns (late requests are forwarded at once).
func (p *Proxy) Close() error {
	p.once.Do(func() {
		close(p.closing)
		if p.tox != nil {
			p.tox.Stop()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.srv.Shutdown(ctx); err != nil {
			p.closeErr = fmt.Errorf("faultproxy: shutdown: %w", err)
			_ = p.srv.Close()
		}
		<-p.srvDone
		p.late.Wait()
		unregister(p.inj.id)
	})
	return p.closeErr
}

var (
	errDropResponse    = errors.New("faultproxy: drop response")
	errInternalApplied = errors.New("faultproxy: 500 after apply")
)

type (
	kindKey    struct{}
	captureKey struct{} // an eventually consistent read whose answer is recorded (capture)
)

func kindOf(ctx context.Context) string {
	k, _ := ctx.Value(kindKey{}).(string)
	return k
}

// Error types as DynamoDB sends them in "__type".
const (
	typeThroughputExceeded  = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
	typeThrottling          = "com.amazon.coral.availability#ThrottlingException"
	typeInternalServerError = "com.amazonaws.dynamodb.v20120810#InternalServerError"
)

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, rp *httputil.ReverseProxy) {
	p.inj.requests.Add(1)
	// Read the whole (small) body first, so that a request is forwarded complete even if
	// the client goes away meanwhile.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away mid-request (e.g. a reset upstream): nothing to forward
	}
	if until := p.inj.blackoutUntil.Load(); until != 0 && time.Now().UnixNano() < until {
		panic(http.ErrAbortHandler) // cut off: nothing is forwarded
	}
	kind := p.inj.decideHTTP()
	target := r.Header.Get("X-Amz-Target")
	var shape *readShape
	if kind == "" && p.inj.faults.Load().Rates[KindStaleRead] > 0 {
		if ref, canon, names, ok := eventualRead(target, body); ok {
			shape = p.inj.stale.shape(ref, canon, names, target, r.Header, body)
			if p.inj.serveStale(w, shape) {
				return
			}
		}
	}
	switch kind {
	case KindBlackout:
		p.inj.blackoutUntil.Store(time.Now().Add(BlackoutFor).UnixNano())
	case KindThroughputExceeded:
		writeAPIError(w, http.StatusBadRequest, typeThroughputExceeded,
			"The level of configured provisioned throughput for the table was exceeded. "+
				"Consider increasing your provisioning level with the UpdateTable API.")
		return
	case KindThrottling:
		writeAPIError(w, http.StatusBadRequest, typeThrottling, "Rate of requests exceeds the allowed throughput.")
		return
	case KindInternalError:
		writeAPIError(w, http.StatusInternalServerError, typeInternalServerError, "Internal server error")
		return
	case KindLate:
		p.forwardLate(r, body, p.inj.lateDelay())
		panic(http.ErrAbortHandler) // the caller gets no answer
	case KindStall:
		t := time.NewTimer(p.inj.faults.Load().StallFor)
		select {
		case <-t.C:
		case <-p.closing:
			t.Stop()
		}
	}
	// Carry the request through to the engine whatever the client does.
	ctx := context.WithValue(context.WithoutCancel(r.Context()), kindKey{}, kind)
	if shape != nil {
		ctx = context.WithValue(ctx, captureKey{}, capture{shape: shape, sent: time.Now()})
	}
	r = r.WithContext(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	// The plain writer hides http.CloseNotifier, through which ReverseProxy would
	// otherwise cancel the forwarded request when the client disconnects.
	rp.ServeHTTP(plainWriter{w}, r)
	p.afterWrite(target, body)
}

// forwardLate sends a copy of r (with body) to the engine after d, or at once when the
// proxy closes; its answer is discarded.
func (p *Proxy) forwardLate(r *http.Request, body []byte, d time.Duration) {
	p.late.Add(1)
	go func() {
		defer p.late.Done()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-p.closing:
			t.Stop()
		}
		// Record the state it left even if its answer was lost (it may have landed): a
		// stale read may serve the last recorded state for as long as no write follows.
		_, _, _ = p.direct(r.URL.Path, r.Header, body)
		p.afterWrite(r.Header.Get("X-Amz-Target"), body)
	}()
}

// direct sends a request of the proxy's own (a late copy, a stale-read refresh) straight to
// the engine and returns its answer (the body read up to maxCaptured+1 bytes).
func (p *Proxy) direct(path string, h http.Header, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, p.target.JoinPath(path).String(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header = h.Clone()
	resp, err := p.lateHTTP.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCaptured+1))
	return resp, b, err
}

// plainWriter is an http.ResponseWriter and nothing else.
type plainWriter struct{ http.ResponseWriter }

func writeAPIError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]string{"__type": typ, "message": msg})
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("X-Amzn-Requestid", newID())
	h.Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// injector holds the seeded fault decisions and the counts of one proxy.
type injector struct {
	id       string
	faults   atomic.Pointer[Faults]
	mu       sync.Mutex
	rng      *rand.Rand
	counts   map[string]int64
	requests atomic.Int64

	blackoutUntil atomic.Int64 // unix ns: requests are refused until then

	stale *staleCache // states of items for stale reads
}

// lateDelay draws the delay of a late request.
func (inj *injector) lateDelay() time.Duration {
	f := inj.faults.Load()
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return time.Duration(inj.rng.Int64N(int64(f.LateFor) + 1))
}

func newInjector(seed uint64, f Faults) *injector {
	inj := &injector{
		id:     newID(),
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		counts: map[string]int64{},
		stale:  newStaleCache(),
	}
	inj.faults.Store(&f)
	register(inj)
	return inj
}

// decideHTTP draws the HTTP-level fault of one request ("" for none) and counts it.
func (inj *injector) decideHTTP() string {
	f := inj.faults.Load()
	inj.mu.Lock()
	defer inj.mu.Unlock()
	u := inj.rng.Float64()
	for _, k := range httpKinds {
		r := f.Rates[k]
		if u < r {
			inj.counts[k]++
			return k
		}
		u -= r
	}
	return ""
}

// decide draws one independent fault of kind and counts it when it fires.
func (inj *injector) decide(kind string) bool {
	r := inj.faults.Load().Rates[kind]
	if r <= 0 {
		return false
	}
	inj.mu.Lock()
	defer inj.mu.Unlock()
	if inj.rng.Float64() < r {
		inj.counts[kind]++
		return true
	}
	return false
}

func (inj *injector) snapshot() map[string]int64 {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	out := make(map[string]int64, len(Kinds))
	for _, k := range Kinds {
		out[k] = inj.counts[k]
	}
	return out
}

// Injectors by id, for the toxics (toxiproxy creates toxics from JSON attributes).
var injectors sync.Map

func register(inj *injector) { injectors.Store(inj.id, inj) }
func unregister(id string)   { injectors.Delete(id) }

func lookup(id string) *injector {
	v, ok := injectors.Load(id)
	if !ok {
		return nil
	}
	return v.(*injector)
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func newID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
