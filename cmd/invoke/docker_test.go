package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/internal/obs"
	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/template"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// dockerEnvFile is the --env-vars file of the documented sam local invoke setup.
const dockerEnvFile = "events/env.docker.json"

// TestDockerEnvVarsFile checks, without Docker, what `sam local invoke --env-vars
// events/env.docker.json` relies on (docs/local-invoke.md):
//   - the file has a section for each function of the template and no other;
//   - each section sets only variables the template declares for that function (SAM
//     ignores the others silently);
//   - each sets every declared variable whose template value is an intrinsic (!Ref ...):
//     SAM CLI cannot resolve a resource's name, and the function would get an empty or
//     wrong table name;
//   - the values are the local stack's (the tables `invoke -tables` creates, stage local),
//     and DYNAMODB_ENDPOINT is obs.DockerEndpoint;
//   - in the environment SAM CLI builds for the function's container with this file
//     (testdata/sam-local-env.json, written by testdata/sam-local-env.py with the SAM CLI
//     version the Makefile pins), the function's endpoint check accepts it, and the
//     function's DynamoDB client is pointed at it.
func TestDockerEnvVarsFile(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, dockerEnvFile)
	var file map[string]map[string]any
	if err := json.Unmarshal(mustRead(t, path), &file); err != nil {
		t.Fatalf("%s: %v", dockerEnvFile, err)
	}
	fns, err := stack.Functions(tpl)
	if err != nil {
		t.Fatal(err)
	}
	var ids, sections []string
	for _, f := range fns {
		ids = append(ids, f.LogicalID)
	}
	for s := range file {
		sections = append(sections, s)
	}
	sort.Strings(ids)
	sort.Strings(sections)
	if !slices.Equal(ids, sections) {
		t.Errorf("%s has sections %v, the template's functions are %v", dockerEnvFile, sections, ids)
	}
	var sam struct {
		SAMCLIVersion string                       `json:"samCliVersion"`
		Functions     map[string]map[string]string `json:"functions"`
	}
	if err := json.Unmarshal(mustRead(t, filepath.Join(root, "cmd", "invoke", "testdata", "sam-local-env.json")), &sam); err != nil {
		t.Fatal(err)
	}
	if pin := makefileVar(t, filepath.Join(root, "Makefile"), "SAM_CLI_VERSION"); sam.SAMCLIVersion != pin {
		t.Errorf("testdata/sam-local-env.json was written by SAM CLI %s, the Makefile pins %s: regenerate it (testdata/sam-local-env.py)", sam.SAMCLIVersion, pin)
	}
	vals, err := stack.Local{Parameters: map[string]string{"Stage": "local"}, Region: region, AccountID: accountID}.Values(tpl)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		t.Run(f.LogicalID, func(t *testing.T) {
			declared, err := f.ResolveEnvironment(vals)
			if err != nil {
				t.Fatal(err)
			}
			set, ignored, err := loadEnvVars(path, f.LogicalID, declared)
			if err != nil {
				t.Fatal(err)
			}
			if len(ignored) > 0 {
				t.Errorf("sets variables the template does not declare for the function: %v", ignored)
			}
			if _, ok := declared[obs.EndpointEnv]; !ok {
				t.Errorf("the template declares no %s for the function: --env-vars cannot set it", obs.EndpointEnv)
			}
			for k, raw := range f.Environment() {
				if _, literal := raw.(string); !literal {
					if _, ok := set[k]; !ok {
						t.Errorf("%s is %v in the template, which sam local invoke cannot resolve: the file must set it", k, raw)
					}
				}
			}
			for k, v := range set {
				want := declared[k]
				if k == obs.EndpointEnv {
					want = obs.DockerEndpoint
				}
				if v != want {
					t.Errorf("%s = %q, want %q (the local stack's)", k, v, want)
				}
			}

			// The function's init under SAM CLI, in the environment SAM CLI gives its container
			// (the runtime interface emulator adds AWS_LAMBDA_RUNTIME_API).
			samEnv := sam.Functions[f.LogicalID]
			if len(samEnv) == 0 {
				t.Fatalf("testdata/sam-local-env.json has no %s: regenerate it (testdata/sam-local-env.py)", f.LogicalID)
			}
			for k := range declared {
				if got, want := samEnv[k], set[k]; k != obs.EndpointEnv && want != "" && got != want {
					t.Errorf("testdata/sam-local-env.json: %s = %q, the env-vars file says %q: regenerate it (testdata/sam-local-env.py)", k, got, want)
				}
			}
			for _, k := range append(slices.Clone(obs.EndpointOverrideEnvs), "AWS_LAMBDA_RUNTIME_API", "AWS_PROFILE",
				"AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE") {
				t.Setenv(k, "")
			}
			t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "config"))
			t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "credentials"))
			t.Setenv("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")
			for k, v := range samEnv {
				t.Setenv(k, v)
			}
			if samEnv[obs.EndpointEnv] != obs.DockerEndpoint {
				t.Errorf("under sam local invoke %s = %q, want %q", obs.EndpointEnv, samEnv[obs.EndpointEnv], obs.DockerEndpoint)
			}
			if err := obs.CheckEndpointOverrides(); err != nil {
				t.Errorf("under sam local invoke the function would refuse its endpoint: %v", err)
			}
			cfg, err := obs.AWSConfig(context.Background())
			if err != nil {
				t.Fatalf("AWSConfig under sam local invoke: %v", err)
			}
			if ep := aws.ToString(dynamodb.NewFromConfig(cfg).Options().BaseEndpoint); ep != obs.DockerEndpoint {
				t.Errorf("the function's DynamoDB endpoint = %q, want %q", ep, obs.DockerEndpoint)
			}
		})
	}
}

// TestLocalInvokeDocMatches: docs/local-invoke.md names the env-vars file, the endpoint's
// container name and port, and a sam local invoke command per function with an event file
// of events/ that checkEvent accepts for that function.
func TestLocalInvokeDocMatches(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	doc := string(mustRead(t, filepath.Join(root, "docs", "local-invoke.md")))
	for _, s := range []string{dockerEnvFile, "--name dynamodb-local", "--docker-network", obs.DockerEndpoint, "-sharedDb", "make local-tables"} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/local-invoke.md does not mention %q", s)
		}
	}
	fns, err := stack.Functions(tpl)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		i := strings.Index(doc, "sam local invoke "+f.LogicalID+" ")
		if i < 0 {
			t.Errorf("no `sam local invoke %s ...` command", f.LogicalID)
			continue
		}
		line := doc[i:]
		line = line[:strings.IndexByte(line, '\n')]
		for strings.HasSuffix(line, "\\") { // a continued command
			rest := doc[i+len(line)+1:]
			next := rest[:strings.IndexByte(rest, '\n')]
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(next)
			i += len(next) + 1
		}
		fields := strings.Fields(line)
		ev := ""
		for j, fld := range fields {
			if (fld == "-e" || fld == "--event") && j+1 < len(fields) {
				ev = fields[j+1]
			}
		}
		if !strings.Contains(line, "--env-vars "+dockerEnvFile) || ev == "" {
			t.Errorf("%s: command %q lacks --env-vars %s or -e EVENT", f.LogicalID, line, dockerEnvFile)
			continue
		}
		if err := checkEvent(f, mustRead(t, filepath.Join(root, ev))); err != nil {
			t.Errorf("%s: the documented event %s: %v", f.LogicalID, ev, err)
		}
	}
}

// TestSetupTables: -tables creates the template's tables for the stage at DYNAMODB_ENDPOINT
// and applies the seed; without DYNAMODB_ENDPOINT it refuses (an engine of its own would
// vanish at exit, tables and all).
func TestSetupTables(t *testing.T) {
	tpl := testenv.Template(t)
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	stage := "t" + randomHex(6)
	t.Cleanup(func() { deleteTables(t, tpl, stage) })
	var stderr bytes.Buffer
	c := config{stage: stage, tablesOnly: true, seed: filepath.Join(root, "events", "seed-inventory.json")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code, err := setupTables(ctx, c, tpl, &stderr); code != 0 || err != nil {
		t.Fatalf("setupTables = %d, %v\n%s", code, err, stderr.String())
	}
	client := testenv.Client(t)
	for _, name := range []string{"turnstile-" + stage + "-locks", "turnstile-" + stage + "-orders", "turnstile-" + stage + "-inventory"} {
		if _, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}); err != nil {
			t.Errorf("table %s: %v", name, err)
		}
	}
	for _, s := range []string{"invoke: seeded MUG-RED-350: 40 available", "invoke: tables ready at " + testenv.Endpoint()} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
		}
	}
	// Again: the tables exist, nothing is created, the seed is applied again.
	stderr.Reset()
	if code, err := setupTables(ctx, c, tpl, &stderr); code != 0 || err != nil || strings.Contains(stderr.String(), "created table") {
		t.Fatalf("second setupTables = %d, %v\n%s", code, err, stderr.String())
	}

	t.Setenv(obs.EndpointEnv, "")
	if code, err := setupTables(ctx, c, tpl, &stderr); code != exitSetup || err == nil || !strings.Contains(err.Error(), "-tables needs DYNAMODB_ENDPOINT") {
		t.Errorf("without DYNAMODB_ENDPOINT: %d, %v", code, err)
	}
}

// makefileVar returns the value of a "NAME ?= value" (or := / =) line of the Makefile.
func makefileVar(t *testing.T, path, name string) string {
	t.Helper()
	for _, line := range strings.Split(string(mustRead(t, path)), "\n") {
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimRight(strings.TrimSpace(k), "?:")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s: no %s", path, name)
	return ""
}
