package obs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// X-Ray's trace id and trace header, for the OpenTelemetry back end. They are written here
// rather than taken from go.opentelemetry.io/contrib/propagators/aws: that module was
// deprecated without a successor in 2026-09 (it has no owner), and both pieces are a few
// lines of a published format
// (https://docs.aws.amazon.com/xray/latest/devguide/xray-concepts.html#xray-concepts-tracingheader).

// XRayTraceHeader is the HTTP header (and Lambda's _X_AMZN_TRACE_ID value) that carries an
// X-Ray trace context: "Root=1-<8 hex epoch seconds>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>".
const XRayTraceHeader = "X-Amzn-Trace-Id"

// xrayIDGenerator makes trace ids X-Ray accepts: the first 4 bytes are the start time in
// epoch seconds (big-endian), the other 12 random. X-Ray rejects (or ages out at once)
// traces whose time part is not recent, so OpenTelemetry's fully random ids would be lost.
type xrayIDGenerator struct {
	now func() time.Time
}

// NewIDs implements sdktrace.IDGenerator.
func (g xrayIDGenerator) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	now := time.Now
	if g.now != nil {
		now = g.now
	}
	binary.BigEndian.PutUint32(tid[:4], uint32(now().Unix()))
	for {
		_, _ = rand.Read(tid[4:]) // crypto/rand.Read does not fail on supported platforms
		if tid.IsValid() {
			break
		}
	}
	return tid, newSpanID()
}

// NewSpanID implements sdktrace.IDGenerator.
func (xrayIDGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}

// xrayPropagator reads and writes the X-Ray trace header (XRayTraceHeader). Extract
// accepts the header in any key order, ignores keys it does not know (Lineage, Self) and
// leaves the context unchanged when Root or Parent is missing or malformed.
type xrayPropagator struct{}

var _ propagation.TextMapPropagator = xrayPropagator{}

// Inject implements propagation.TextMapPropagator.
func (xrayPropagator) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	carrier.Set(XRayTraceHeader, formatXRayHeader(sc))
}

// Extract implements propagation.TextMapPropagator.
func (xrayPropagator) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	sc, ok := parseXRayHeader(carrier.Get(XRayTraceHeader))
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Fields implements propagation.TextMapPropagator.
func (xrayPropagator) Fields() []string { return []string{XRayTraceHeader} }

func formatXRayHeader(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	h := hex.EncodeToString(tid[:])
	sampled := "0"
	if sc.IsSampled() {
		sampled = "1"
	}
	return "Root=1-" + h[:8] + "-" + h[8:] + ";Parent=" + hex.EncodeToString(sid[:]) + ";Sampled=" + sampled
}

// parseXRayHeader parses an X-Ray trace header; ok is false unless it names a valid
// Root (version 1) and Parent. Sampled=1 sets the sampled flag; 0, "?" or none leave it
// unset.
func parseXRayHeader(h string) (sc trace.SpanContext, ok bool) {
	var cfg trace.SpanContextConfig
	var haveRoot, haveParent bool
	for part := range strings.SplitSeq(h, ";") {
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			continue
		}
		switch strings.TrimSpace(k) {
		case "Root":
			ver, rest, ok1 := strings.Cut(strings.TrimSpace(v), "-")
			epoch, random, ok2 := strings.Cut(rest, "-")
			if !ok1 || !ok2 || ver != "1" || len(epoch) != 8 || len(random) != 24 {
				return trace.SpanContext{}, false
			}
			tid, err := trace.TraceIDFromHex(strings.ToLower(epoch + random))
			if err != nil {
				return trace.SpanContext{}, false
			}
			cfg.TraceID, haveRoot = tid, true
		case "Parent":
			sid, err := trace.SpanIDFromHex(strings.ToLower(strings.TrimSpace(v)))
			if err != nil {
				return trace.SpanContext{}, false
			}
			cfg.SpanID, haveParent = sid, true
		case "Sampled":
			if strings.TrimSpace(v) == "1" {
				cfg.TraceFlags = trace.FlagsSampled
			}
		}
	}
	if !haveRoot || !haveParent {
		return trace.SpanContext{}, false
	}
	cfg.Remote = true
	sc = trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}
