package obs

import (
	"context"
	"io"
	"os"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/turnstile-locks/turnstile/internal/emf"
)

// DefaultNamespace is the CloudWatch namespace used when neither METRICS_NAMESPACE nor
// POWERTOOLS_METRICS_NAMESPACE is set.
const DefaultNamespace = "turnstile"

// Environment variables of the metrics and logs configuration. NamespaceEnv is the project's
// own (template.yaml Globals sets it); the POWERTOOLS_ ones are the names Powertools for AWS
// Lambda reads, accepted so that a function configured the Powertools way is configured here
// too. Where both name one setting, the project's own wins (docs/lambda.md).
const (
	NamespaceEnv           = "METRICS_NAMESPACE"
	PowertoolsNamespaceEnv = "POWERTOOLS_METRICS_NAMESPACE"
	PowertoolsServiceEnv   = "POWERTOOLS_SERVICE_NAME"
)

// ServiceDimension is the dimension (and log key) that carries ServiceName, spelled as
// Powertools spells it.
const ServiceDimension = "service"

// Namespace returns the CloudWatch namespace of the functions' metrics: METRICS_NAMESPACE,
// else POWERTOOLS_METRICS_NAMESPACE, else DefaultNamespace.
func Namespace() string {
	for _, k := range []string{NamespaceEnv, PowertoolsNamespaceEnv} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	return DefaultNamespace
}

// ServiceName returns the service name of POWERTOOLS_SERVICE_NAME, "" when it is unset. Set,
// it adds a "service" key to every log record and a {service} dimension set to the metrics.
func ServiceName() string { return strings.TrimSpace(os.Getenv(PowertoolsServiceEnv)) }

// MetricsOutput is where Metrics writes its EMF documents: stdout, which Lambda sends to
// CloudWatch Logs, where the metrics are extracted. Tests may replace it.
var MetricsOutput io.Writer = os.Stdout

// Metrics returns an EMF metrics logger for one invocation of function (a short, stable name
// such as "orderprocessor"): namespace Namespace(), the dimension set {Function, Stage}
// (Stage from STAGE, default "local"), and the invocation's requestId and X-Ray trace id as
// properties, so a metric can be traced back to its logs. With a ServiceName, every metric is
// also published under a second dimension set, {service}: the series Powertools' metrics
// utility publishes by default, so dashboards and alarms built on Powertools conventions find
// turnstile's metrics. That second set doubles the number of custom metrics (CloudWatch bills
// each), which is why it needs POWERTOOLS_SERVICE_NAME; the template's alarms and dashboard
// watch {Function, Stage}, which does not change. Record with PutMetric and call Flush before
// the handler returns.
func Metrics(ctx context.Context, function string) *emf.Logger {
	stage := os.Getenv("STAGE")
	if stage == "" {
		stage = "local"
	}
	m := emf.New(MetricsOutput, Namespace())
	m.AddDimensionSet(emf.Dimension{Name: "Function", Value: function}, emf.Dimension{Name: "Stage", Value: stage})
	if svc := ServiceName(); svc != "" {
		m.AddDimensionSet(emf.Dimension{Name: ServiceDimension, Value: svc})
	}
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		m.PutProperty(RequestIDKey, lc.AwsRequestID)
	}
	if trace, ok := ctx.Value("x-amzn-trace-id").(string); ok && trace != "" {
		m.PutProperty("traceId", trace)
	}
	return m
}
