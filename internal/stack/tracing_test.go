package stack

import (
	"cmp"
	"reflect"
	"strings"
	"testing"

	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/template"
)

// TestTracingParameter: the Tracing parameter picks the functions' tracing back end
// (obs.TracingEnv, X-Ray by default), every function keeps Lambda's active tracing, and
// only Tracing=otel adds the ADOT collector layer (docs/deploy.md, Tracing).
func TestTracingParameter(t *testing.T) {
	tpl, _ := load(t)
	decode := func(s string) any {
		v, err := template.Decode([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	p, _ := tpl.Parameters["Tracing"].(map[string]any)
	if p == nil || p["Default"] != obs.TracingXRay ||
		!reflect.DeepEqual(p["AllowedValues"], []any{obs.TracingXRay, obs.TracingOTel}) {
		t.Fatalf("parameter Tracing = %v, want default %q, allowed [%s %s]", p, obs.TracingXRay, obs.TracingXRay, obs.TracingOTel)
	}
	if c := tpl.Conditions["UseOTel"]; !reflect.DeepEqual(c, decode(`!Equals [!Ref Tracing, otel]`)) {
		t.Errorf("condition UseOTel = %v", c)
	}
	layers := decode(`!If [UseOTel, [!If [HasOTelCollectorLayerArn, !Ref OTelCollectorLayerArn,
	  !Sub "arn:${AWS::Partition}:lambda:${AWS::Region}:901920570463:layer:aws-otel-collector-arm64-ver-0-117-0:1"]],
	  !Ref AWS::NoValue]`)
	for _, f := range functions(t, tpl) {
		if got := f.Environment()[obs.TracingEnv]; !reflect.DeepEqual(got, decode(`!Ref Tracing`)) {
			t.Errorf("%s: %s = %v, want !Ref Tracing", f.LogicalID, obs.TracingEnv, got)
		}
		if f.Properties["Tracing"] != "Active" {
			t.Errorf("%s: Tracing = %v, want Active in both modes", f.LogicalID, f.Properties["Tracing"])
		}
		if !reflect.DeepEqual(f.Properties["Layers"], layers) {
			t.Errorf("%s: Layers = %v, want the collector layer only when UseOTel", f.LogicalID, f.Properties["Layers"])
		}
		env := f.Environment()
		for k := range env {
			if strings.HasPrefix(k, "OTEL_") || k == "AWS_LAMBDA_EXEC_WRAPPER" {
				t.Errorf("%s: %s is set; the code's defaults suit the collector layer, and a Go binary needs no wrapper", f.LogicalID, k)
			}
		}
		// The local tools (make invoke) resolve the variable like CloudFormation does.
		for _, mode := range []string{"", obs.TracingOTel} {
			l := Local{}
			if mode != "" {
				l.Parameters = map[string]string{"Tracing": mode}
			}
			v, err := l.Values(tpl)
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.ResolveEnvironment(v)
			if err != nil {
				t.Fatal(err)
			}
			want := cmp.Or(mode, obs.TracingXRay)
			if got[obs.TracingEnv] != want {
				t.Errorf("%s with Tracing=%q: %s=%q, want %q", f.LogicalID, mode, obs.TracingEnv, got[obs.TracingEnv], want)
			}
		}
	}
	if a, _ := tpl.Parameters["OTelCollectorLayerArn"].(map[string]any); a == nil || a["Default"] != "" {
		t.Errorf("parameter OTelCollectorLayerArn = %v, want a default of \"\"", a)
	}
}
