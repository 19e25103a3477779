package obs

import (
	"context"
	"io"
	"os"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/turnstile-locks/turnstile/internal/emf"
)

// DefaultNamespace is the CloudWatch namespace used when METRICS_NAMESPACE is unset.
const DefaultNamespace = "turnstile"

// MetricsOutput is where Metrics writes its EMF documents: stdout, which Lambda sends to
// CloudWatch Logs, where the metrics are extracted. Tests may replace it.
var MetricsOutput io.Writer = os.Stdout

// Metrics returns an EMF metrics logger for one invocation of function (a short, stable name
// such as "orderprocessor"): namespace METRICS_NAMESPACE (default "turnstile"), one
// dimension set {Function, Stage} (Stage from STAGE, default "local"), and the invocation's
// requestId and X-Ray trace id as properties, so a metric can be traced back to its logs.
// Record with PutMetric and call Flush before the handler returns.
func Metrics(ctx context.Context, function string) *emf.Logger {
	ns := os.Getenv("METRICS_NAMESPACE")
	if ns == "" {
		ns = DefaultNamespace
	}
	stage := os.Getenv("STAGE")
	if stage == "" {
		stage = "local"
	}
	m := emf.New(MetricsOutput, ns)
	m.AddDimensionSet(emf.Dimension{Name: "Function", Value: function}, emf.Dimension{Name: "Stage", Value: stage})
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		m.PutProperty(RequestIDKey, lc.AwsRequestID)
	}
	if trace, ok := ctx.Value("x-amzn-trace-id").(string); ok && trace != "" {
		m.PutProperty("traceId", trace)
	}
	return m
}
