package stack

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/template"
)

func load(t *testing.T) (*template.Template, string) {
	t.Helper()
	tpl, err := template.LoadDefault()
	if err != nil {
		t.Fatalf("loading template.yaml: %v", err)
	}
	root, err := template.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	return tpl, root
}

func functions(t *testing.T, tpl *template.Template) []Function {
	t.Helper()
	fns, err := Functions(tpl)
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) == 0 {
		t.Fatal("the template has no functions")
	}
	return fns
}

// attributes lists the Fn::GetAtt attributes of the resource types the template uses.
var attributes = map[string][]string{
	"AWS::DynamoDB::Table":          {"Arn", "StreamArn"},
	"AWS::SQS::Queue":               {"Arn", "QueueName", "QueueUrl"},
	"AWS::Events::EventBus":         {"Arn", "Name", "Policy"},
	"AWS::Serverless::Function":     {"Arn"},
	"AWS::SNS::Topic":               {"TopicArn", "TopicName"},
	"AWS::IAM::Role":                {"Arn", "RoleId"},
	"AWS::Logs::LogGroup":           {"Arn"},
	"AWS::Lambda::Function":         {"Arn"},
	"AWS::Events::Rule":             {"Arn"},
	"AWS::Scheduler::Schedule":      {"Arn"},
	"AWS::Serverless::StateMachine": {"Arn", "Name"},
	"AWS::CloudWatch::Alarm":        {"Arn"},
	"AWS::CloudWatch::Dashboard":    {},
}

func TestEveryReferenceResolves(t *testing.T) {
	tpl, _ := load(t)
	refs, err := TemplateReferences(tpl)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 {
		t.Fatal("no references found: the walker is broken")
	}
	for _, r := range refs {
		if PseudoParameters[r.Target] {
			continue
		}
		if _, ok := tpl.Parameters[r.Target]; ok {
			if r.Attribute != "" || r.Kind == "Fn::GetAtt" {
				t.Errorf("%v: a parameter has no attributes", r)
			}
			continue
		}
		res, ok := tpl.Resources[r.Target]
		if !ok {
			t.Errorf("%v: no resource, parameter or pseudo parameter %s", r, r.Target)
			continue
		}
		if r.Attribute != "" {
			known, typed := attributes[res.Type]
			if !typed {
				t.Errorf("%v: add the attributes of %s to this test", r, res.Type)
			} else if !slices.Contains(known, r.Attribute) {
				t.Errorf("%v: %s has no attribute %s (has %v)", r, res.Type, r.Attribute, known)
			}
		}
	}
}

func TestReferenceWalker(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // "Kind Target[.Attr]"
	}{
		{"short forms", "A: !Ref Stage\nB: !GetAtt LockTable.StreamArn\n", []string{"Ref Stage", "Fn::GetAtt LockTable.StreamArn"}},
		{"long forms", "A: {Ref: X}\nB: {\"Fn::GetAtt\": [Q, Arn]}\n", []string{"Ref X", "Fn::GetAtt Q.Arn"}},
		{"sub", "A: !Sub 'arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${Q.QueueName}-${Stage}'\n",
			[]string{"Fn::Sub AWS::Partition", "Fn::Sub AWS::Region", "Fn::Sub AWS::AccountId", "Fn::Sub Q.QueueName", "Fn::Sub Stage"}},
		{"sub literal and local variables", "A: !Sub ['${!Literal}-${name}-${Other}', {name: !Ref Stage}]\n",
			[]string{"Ref Stage", "Fn::Sub Other"}},
		{"nested in lists", "A: [x, {B: [!Ref Y]}]\n", []string{"Ref Y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := template.Decode([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			refs, err := References(v, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range refs {
				s := r.Kind + " " + r.Target
				if r.Attribute != "" {
					s += "." + r.Attribute
				}
				got = append(got, s)
			}
			sort.Strings(got)
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// makeTargets parses the root Makefile: target name -> recipe lines.
func makeTargets(t *testing.T, root string) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatalf("root Makefile: %v", err)
	}
	defer f.Close()
	targets := map[string][]string{}
	head := regexp.MustCompile(`^([A-Za-z0-9_.-]+)\s*:([^=]|$)`)
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := head.FindStringSubmatch(line); m != nil {
			cur = m[1]
			targets[cur] = append(targets[cur], "")
			continue
		}
		if strings.HasPrefix(line, "\t") && cur != "" {
			targets[cur] = append(targets[cur], strings.TrimSpace(line))
			continue
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return targets
}

func TestEveryFunctionBuildsThroughTheRootMakefile(t *testing.T) {
	tpl, root := load(t)
	targets := makeTargets(t, root)
	// sam-build checks the bootstrap of every function listed in LAMBDA_FUNCTIONS.
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LAMBDA_FUNCTIONS\s*:?=(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the root Makefile does not set LAMBDA_FUNCTIONS")
	}
	listed := strings.Fields(string(m[1]))
	var ids []string
	for _, f := range functions(t, tpl) {
		ids = append(ids, f.LogicalID)
	}
	sort.Strings(listed)
	if !slices.Equal(listed, ids) {
		t.Errorf("Makefile LAMBDA_FUNCTIONS = %v, template functions = %v", listed, ids)
	}
	_, statErr := os.Stat(filepath.Join(root, "functions"))
	haveFunctions := statErr == nil
	for _, f := range functions(t, tpl) {
		t.Run(f.LogicalID, func(t *testing.T) {
			if bm, _ := f.Metadata["BuildMethod"].(string); bm != "makefile" {
				t.Errorf("Metadata.BuildMethod = %q, want makefile", bm)
			}
			if cu := f.String("CodeUri"); cu != "." {
				t.Errorf("CodeUri = %q, want \".\" (the module root, where the Makefile is)", cu)
			}
			recipe, ok := targets["build-"+f.LogicalID]
			if !ok {
				t.Fatalf("the root Makefile has no build-%s target", f.LogicalID)
			}
			body := strings.Join(recipe, "\n")
			for _, want := range []string{"./" + f.SourceDir(), "$(ARTIFACTS_DIR)", "bootstrap"} {
				if !strings.Contains(body, want) && !strings.Contains(body, strings.TrimPrefix(want, "./")) {
					t.Errorf("build-%s recipe does not mention %s:\n%s", f.LogicalID, want, body)
				}
			}
			if haveFunctions {
				if _, err := os.Stat(filepath.Join(root, f.SourceDir(), "main.go")); err != nil {
					t.Errorf("%s has no main package: %v", f.SourceDir(), err)
				}
			}
		})
	}
}

func TestFunctionRuntimeSettings(t *testing.T) {
	tpl, _ := load(t)
	for _, f := range functions(t, tpl) {
		t.Run(f.LogicalID, func(t *testing.T) {
			checks := []struct{ path, want string }{
				{"Runtime", "provided.al2023"},
				{"Handler", "bootstrap"},
				{"Tracing", "Active"},
				{"LoggingConfig/LogFormat", "JSON"},
			}
			for _, c := range checks {
				if got := f.String(c.path); got != c.want {
					t.Errorf("%s = %q, want %q", c.path, got, c.want)
				}
			}
			if a := f.Architectures(); !slices.Equal(a, []string{"arm64"}) {
				t.Errorf("Architectures = %v, want [arm64]", a)
			}
			if f.Timeout() < 1 || f.Timeout() > 900 {
				t.Errorf("Timeout = %d", f.Timeout())
			}
			if f.MemorySize() < 128 {
				t.Errorf("MemorySize = %d", f.MemorySize())
			}
		})
	}
}

func TestNoIAMWildcards(t *testing.T) {
	tpl, _ := load(t)
	stmts, delegated := PolicyStatements(tpl)
	if len(stmts) == 0 {
		t.Fatal("no IAM statements found")
	}
	for _, d := range delegated {
		t.Errorf("policy not written in the template (its statements cannot be checked): %s", d)
	}
	for _, p := range Wildcards(stmts) {
		t.Error(p)
	}
}

func TestWildcardDetection(t *testing.T) {
	doc := `
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Policies:
        - AmazonDynamoDBFullAccess
        - DynamoDBCrudPolicy: {TableName: !Ref T}
        - Statement:
            - {Effect: Allow, Action: "dynamodb:*", Resource: !GetAtt T.Arn}
            - {Effect: Allow, Action: [dynamodb:GetItem], Resource: "*"}
            - {Effect: Allow, Action: dynamodb:GetItem, Resource: !Sub "arn:aws:dynamodb:*:*:table/x"}
            - {Effect: Allow, NotAction: iam:PassRole, Resource: !GetAtt T.Arn}
            - {Effect: Allow, Action: dynamodb:GetItem, Resource: !GetAtt T.Arn}
            - {Effect: Allow, Action: [xray:PutTraceSegments, xray:PutTelemetryRecords], Resource: "*"}
            - {Effect: Allow, Action: [xray:PutTraceSegments, dynamodb:Scan], Resource: "*"}
`
	tpl, err := template.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	stmts, delegated := PolicyStatements(tpl)
	if len(delegated) != 2 {
		t.Errorf("delegated policies = %v, want the managed policy and the policy template", delegated)
	}
	problems := Wildcards(stmts)
	want := []string{`Action "dynamodb:*"`, `Statement[1]: Resource *`, `Resource map[Fn::Sub`, "NotAction", "without Action", `Statement[6]: Resource *`}
	for _, w := range want {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, w) }) {
			t.Errorf("no problem reported for %s; got %v", w, problems)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("got %d problems, want %d: %v", len(problems), len(want), problems)
	}
}

// TestLeastPrivilege: a function's role grants access only to resources the function
// uses — the tables and queues its environment references, its event sources, its failure
// destinations and its own log group — plus X-Ray's "*", and every table or queue its
// environment references is covered by a statement. Which actions on the tables and queues
// it uses is the policycheck test's business (the handler packages record their calls).
func TestLeastPrivilege(t *testing.T) {
	tpl, _ := load(t)
	for _, f := range functions(t, tpl) {
		t.Run(f.LogicalID, func(t *testing.T) {
			refs, err := References(f.Environment(), "Environment")
			if err != nil {
				t.Fatal(err)
			}
			uses := map[string]bool{}
			for _, r := range refs {
				if res, ok := tpl.Resources[r.Target]; ok && (res.Type == "AWS::DynamoDB::Table" || res.Type == "AWS::SQS::Queue") {
					uses[r.Target] = true
				}
			}
			platform := platformResources(t, f)
			grants, err := FunctionGrants(tpl, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(grants) == 0 {
				t.Fatal("the function's role grants nothing")
			}
			covered := map[string]bool{}
			for _, g := range grants {
				switch {
				case g.Target == "*":
					if _, ok := NoResourceLevelActions[g.Action]; !ok {
						t.Errorf("%s: %s on \"*\"", g.Path, g.Action)
					}
				case uses[g.Target] && g.Attribute == "Arn":
					covered[g.Target] = true
				case platform[g.Target+"."+g.Attribute]:
				default:
					t.Errorf("%s: grants %s, which the function neither references in its environment nor uses as event source, destination or log group", g.Path, g)
				}
			}
			for id := range uses {
				if !covered[id] {
					t.Errorf("the function uses %s but no statement grants access to it", id)
				}
			}
		})
	}
}

// platformResources returns "LogicalId.Attribute" of the resources Lambda itself uses with
// the function's role: event source queues and streams, failure destinations, the log group.
func platformResources(t *testing.T, f Function) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	add := func(v any, path string) {
		refs, err := References(v, path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			if r.Kind == "Ref" && r.Attribute == "" {
				r.Attribute = "Arn" // a log group is referenced by name, granted by Arn
			}
			out[r.Target+"."+r.Attribute] = true
		}
	}
	for _, e := range f.Events() {
		add(e.Properties["Queue"], e.Name+"/Queue")
		add(e.Properties["Stream"], e.Name+"/Stream")
		add(e.Properties["DestinationConfig"], e.Name+"/DestinationConfig")
	}
	add(f.lookup("EventInvokeConfig/DestinationConfig"), "EventInvokeConfig")
	add(f.lookup("LoggingConfig/LogGroup"), "LoggingConfig/LogGroup")
	return out
}

// TestExecutionRoles: every function runs under its own explicit role, trusted by Lambda
// only, without managed policies, and the role grants Lambda exactly what the function's
// event sources, destinations, log group and tracing need — nothing account-wide.
func TestExecutionRoles(t *testing.T) {
	tpl, _ := load(t)
	seen := map[string]string{}
	for _, f := range functions(t, tpl) {
		t.Run(f.LogicalID, func(t *testing.T) {
			role, err := RoleOf(tpl, f)
			if err != nil {
				t.Fatal(err)
			}
			if role == "" {
				t.Fatal("no explicit Role: SAM would generate one with AWS-managed, account-wide policies")
			}
			if other, dup := seen[role]; dup {
				t.Errorf("role %s is shared with %s", role, other)
			}
			seen[role] = f.LogicalID
			if f.Properties["Policies"] != nil {
				t.Error("Policies is ignored when Role is set: move the statements to the role")
			}
			rp := tpl.Resources[role].Properties
			if rp["ManagedPolicyArns"] != nil {
				t.Errorf("%s has managed policies: %v", role, rp["ManagedPolicyArns"])
			}
			trust, _ := rp["AssumeRolePolicyDocument"].(map[string]any)
			ts := statements(role, "AssumeRolePolicyDocument", trust)
			if len(ts) != 1 {
				t.Fatalf("%s: want one trust statement, got %d", role, len(ts))
			}
			p, _ := ts[0].Raw["Principal"].(map[string]any)
			if len(p) != 1 || p["Service"] != "lambda.amazonaws.com" || ts[0].Effect != "Allow" ||
				!slices.Equal(ts[0].Actions, []any{"sts:AssumeRole"}) {
				t.Errorf("%s: trust statement %v, want lambda.amazonaws.com sts:AssumeRole only", role, ts[0].Raw)
			}

			grants, err := FunctionGrants(tpl, f)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, g := range grants {
				got[g.String()] = true
			}
			want := []string{}
			target := func(v any) string {
				refs, _ := References(v, "x")
				if len(refs) != 1 {
					t.Fatalf("want one reference in %v", v)
				}
				a := refs[0].Attribute
				if a == "" {
					a = "Arn"
				}
				return refs[0].Target + "." + a
			}
			for _, e := range f.Events() {
				switch e.Type {
				case "SQS":
					q := target(e.Properties["Queue"])
					for _, a := range []string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility"} {
						want = append(want, a+" on "+q)
					}
				case "DynamoDB":
					st := target(e.Properties["Stream"])
					for _, a := range []string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"} {
						want = append(want, a+" on "+st)
					}
				}
				if d, _ := e.Properties["DestinationConfig"].(map[string]any); d != nil {
					of, _ := d["OnFailure"].(map[string]any)
					want = append(want, "sqs:SendMessage on "+target(of["Destination"]))
				}
			}
			if d, ok := f.lookup("EventInvokeConfig/DestinationConfig/OnFailure/Destination").(map[string]any); ok {
				want = append(want, "sqs:SendMessage on "+target(d))
			}
			lg, ok := f.lookup("LoggingConfig/LogGroup").(map[string]any)
			if !ok {
				t.Fatal("no LoggingConfig.LogGroup: Lambda would log to a group the role cannot be scoped to")
			}
			lgID := strings.TrimSuffix(target(lg), ".Arn")
			if res := tpl.Resources[lgID]; res.Type != "AWS::Logs::LogGroup" || res.Properties["RetentionInDays"] == nil {
				t.Errorf("log group %s: want an AWS::Logs::LogGroup of the template with RetentionInDays", lgID)
			}
			want = append(want, "logs:CreateLogStream on "+lgID+".Arn", "logs:PutLogEvents on "+lgID+".Arn")
			if f.String("Tracing") == "Active" {
				want = append(want, "xray:PutTraceSegments on *", "xray:PutTelemetryRecords on *")
			}
			for _, w := range want {
				if !got[w] {
					t.Errorf("the role does not grant %s", w)
				}
			}
			for _, g := range grants {
				if strings.HasPrefix(g.Action, "logs:") && g.String() != "logs:CreateLogStream on "+lgID+".Arn" && g.String() != "logs:PutLogEvents on "+lgID+".Arn" {
					t.Errorf("%s: %s: logs go to the function's own group only", g.Path, g)
				}
			}
		})
	}
}

// TestResourcePoliciesOnlyDeny: a resource policy statement whose principal is everyone
// must deny; allows name a principal.
func TestResourcePoliciesOnlyDeny(t *testing.T) {
	tpl, _ := load(t)
	stmts, _ := PolicyStatements(tpl)
	n := 0
	for _, s := range stmts {
		switch tpl.Resources[s.Owner].Type {
		case "AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy", "AWS::Events::EventBusPolicy":
		default:
			continue
		}
		n++
		p := s.Raw["Principal"]
		everyone := p == "*"
		if m, ok := p.(map[string]any); ok && m["AWS"] == "*" {
			everyone = true
		}
		if everyone && s.Effect != "Deny" {
			t.Errorf("%s: Principal * with Effect %s", s.Path, s.Effect)
		}
		if everyone && s.Raw["Condition"] == nil {
			t.Errorf("%s: a Deny to everyone without a condition locks the resource", s.Path)
		}
	}
	if n == 0 {
		t.Fatal("no resource policy statements found")
	}
}

// TestWhoMaySendWork: the orders queue and the event bus accept work from named principals
// only, the orders queue over TLS only, and the StockAdjusted rule matches its source.
func TestWhoMaySendWork(t *testing.T) {
	tpl, _ := load(t)
	stmts, _ := PolicyStatements(tpl)
	find := func(owner, sid string) *Statement {
		for i := range stmts {
			if stmts[i].Owner == owner && stmts[i].Raw["Sid"] == sid {
				return &stmts[i]
			}
		}
		t.Fatalf("no statement %s in %s", sid, owner)
		return nil
	}
	queues, _ := References(tpl.Resources["OrdersQueuePolicy"].Properties["Queues"], "Queues")
	if len(queues) != 1 || queues[0].Target != "OrdersQueue" {
		t.Fatalf("OrdersQueuePolicy applies to %v", queues)
	}
	tls := find("OrdersQueuePolicy", "DenyInsecureTransport")
	cond, _ := tls.Raw["Condition"].(map[string]any)
	b, _ := cond["Bool"].(map[string]any)
	if tls.Effect != "Deny" || b["aws:SecureTransport"] != "false" || !slices.Contains(tls.Actions, any("sqs:SendMessage")) ||
		!slices.Contains(tls.Actions, any("sqs:ReceiveMessage")) {
		t.Errorf("DenyInsecureTransport = %v", tls.Raw)
	}
	send := find("OrdersQueuePolicy", "DenySendExceptNamedProducers")
	cond, _ = send.Raw["Condition"].(map[string]any)
	arnNe, _ := cond["ArnNotEquals"].(map[string]any)
	strNe, _ := cond["StringNotEquals"].(map[string]any)
	janitor, _ := References(arnNe["aws:PrincipalArn"], "x")
	producers, _ := References(strNe["aws:PrincipalArn"], "x")
	if send.Effect != "Deny" || !slices.Equal(send.Actions, []any{"sqs:SendMessage"}) ||
		len(janitor) != 1 || janitor[0].Target != "JanitorRole" || len(producers) != 1 || producers[0].Target != "OrderProducerPrincipalArns" {
		t.Errorf("DenySendExceptNamedProducers = %v: want a Deny of sqs:SendMessage to all but the janitor's role and the OrderProducerPrincipalArns", send.Raw)
	}
	bus := find("TurnstileBusPolicy", "DenyPutEventsExceptNamedPublishers")
	cond, _ = bus.Raw["Condition"].(map[string]any)
	strNe, _ = cond["StringNotEquals"].(map[string]any)
	pubs, _ := References(strNe["aws:PrincipalArn"], "x")
	res, _ := References(bus.Resources, "x")
	if bus.Effect != "Deny" || !slices.Equal(bus.Actions, []any{"events:PutEvents"}) || len(pubs) != 1 ||
		pubs[0].Target != "EventPublisherPrincipalArns" || len(res) != 1 || res[0].Target != "TurnstileBus" {
		t.Errorf("bus policy = %v", bus.Raw)
	}
	if busRefs, _ := References(tpl.Resources["TurnstileBusPolicy"].Properties["EventBusName"], "x"); len(busRefs) != 1 || busRefs[0].Target != "TurnstileBus" {
		t.Errorf("TurnstileBusPolicy applies to %v", busRefs)
	}
	f, err := LookupFunction(tpl, "InventoryUpdaterFunction")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range f.Events() {
		if e.Type != "EventBridgeRule" {
			continue
		}
		if refs, _ := References(e.Properties["EventBusName"], "x"); len(refs) != 1 || refs[0].Target != "TurnstileBus" {
			t.Errorf("%s: rule on bus %v, want the app's own bus (its policy governs who publishes)", e.Name, e.Properties["EventBusName"])
		}
		p, _ := e.Properties["Pattern"].(map[string]any)
		if src, _ := p["source"].([]any); len(src) == 0 {
			t.Errorf("%s: the rule pattern does not match source", e.Name)
		}
	}
}

// TestDataIsProtected: tables cannot be deleted by accident (deletion protection, on by
// default) and survive stack deletion and replacement, like the dead-letter queues and the
// other stateful resources; the janitor has reserved concurrency.
func TestDataIsProtected(t *testing.T) {
	tpl, _ := load(t)
	p, _ := tpl.Parameters["TableDeletionProtection"].(map[string]any)
	if p["Default"] != "true" {
		t.Errorf("TableDeletionProtection default = %v, want \"true\"", p["Default"])
	}
	for id, r := range tpl.Resources {
		stateful := false
		switch r.Type {
		case "AWS::DynamoDB::Table":
			stateful = true
			refs, _ := References(r.Properties["DeletionProtectionEnabled"], "x")
			if len(refs) != 1 || refs[0].Target != "TableDeletionProtection" {
				t.Errorf("%s: DeletionProtectionEnabled = %v, want !Ref TableDeletionProtection", id, r.Properties["DeletionProtectionEnabled"])
			}
		case "AWS::SQS::Queue", "AWS::Logs::LogGroup":
			stateful = true
		}
		if stateful && (r.Raw["DeletionPolicy"] != "Retain" || r.Raw["UpdateReplacePolicy"] != "Retain") {
			t.Errorf("%s: DeletionPolicy %v, UpdateReplacePolicy %v, want Retain", id, r.Raw["DeletionPolicy"], r.Raw["UpdateReplacePolicy"])
		}
	}
	f, err := LookupFunction(tpl, "JanitorFunction")
	if err != nil {
		t.Fatal(err)
	}
	if refs, _ := References(f.Properties["ReservedConcurrentExecutions"], "x"); len(refs) != 1 || refs[0].Target != "JanitorReservedConcurrency" {
		t.Errorf("janitor ReservedConcurrentExecutions = %v", f.Properties["ReservedConcurrentExecutions"])
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

func TestJanitorStreamFilterPassesOnlyTTLDeletions(t *testing.T) {
	tpl, root := load(t)
	f, err := LookupFunction(tpl, "JanitorFunction")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []any
	for _, e := range f.Events() {
		if e.Type == "DynamoDB" {
			patterns = append(patterns, e.FilterPatterns()...)
		}
	}
	if len(patterns) == 0 {
		t.Fatal("the janitor's DynamoDB event has no FilterCriteria")
	}
	tests := []struct {
		file string
		want bool
	}{
		{"dynamodb-ttl-remove.json", true},
		{"dynamodb-user-remove.json", false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			ev := readJSON(t, filepath.Join(root, "events", tt.file))
			recs, _ := ev["Records"].([]any)
			if len(recs) == 0 {
				t.Fatal("no Records")
			}
			for i, r := range recs {
				got, err := MatchAny(patterns, r)
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("record %d: filter match = %v, want %v", i, got, tt.want)
				}
			}
		})
	}
}

func TestInventoryRuleMatchesStockAdjusted(t *testing.T) {
	tpl, root := load(t)
	f, err := LookupFunction(tpl, "InventoryUpdaterFunction")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []any
	for _, e := range f.Events() {
		if e.Type == "EventBridgeRule" {
			patterns = append(patterns, e.FilterPatterns()...)
		}
	}
	if len(patterns) != 1 {
		t.Fatalf("want one EventBridge rule pattern, got %d", len(patterns))
	}
	for file, want := range map[string]bool{
		"eventbridge-stock-adjusted.json":           true,
		"eventbridge-stock-adjusted-malformed.json": true, // the handler, not the rule, rejects it
		"scheduled-sweep.json":                      false,
	} {
		got, err := MatchAny(patterns, readJSON(t, filepath.Join(root, "events", file)))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: rule match = %v, want %v", file, got, want)
		}
	}
	// A StockAdjusted event from another source does not feed the inventory updater.
	spoofed := readJSON(t, filepath.Join(root, "events", "eventbridge-stock-adjusted.json"))
	spoofed["source"] = "someone.else"
	if got, err := MatchAny(patterns, spoofed); err != nil || got {
		t.Errorf("StockAdjusted from source someone.else: rule match = %v (%v), want false", got, err)
	}
}

func TestMatchPattern(t *testing.T) {
	ttl := `{"eventName":"REMOVE","userIdentity":{"type":"Service","principalId":"dynamodb.amazonaws.com"},"dynamodb":{"Keys":{"pk":{"S":"SKU#1"}},"OldImage":{"fence":{"N":"42"}}}}`
	tests := []struct {
		name    string
		pattern string
		event   string
		want    bool
		wantErr bool
	}{
		{"exact nested", `{"eventName":["REMOVE"],"userIdentity":{"type":["Service"],"principalId":["dynamodb.amazonaws.com"]}}`, ttl, true, false},
		{"exact mismatch", `{"eventName":["INSERT","MODIFY"]}`, ttl, false, false},
		{"missing object", `{"userIdentity":{"type":["Service"]}}`, `{"eventName":"REMOVE"}`, false, false},
		{"prefix", `{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"SKU#"}]}}}}`, ttl, true, false},
		{"prefix mismatch", `{"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"ORDER#"}]}}}}`, ttl, false, false},
		{"suffix", `{"userIdentity":{"principalId":[{"suffix":".amazonaws.com"}]}}`, ttl, true, false},
		{"exists true", `{"userIdentity":[{"exists":true}]}`, ttl, true, false},
		{"exists false on present", `{"userIdentity":[{"exists":false}]}`, ttl, false, false},
		{"exists false on absent", `{"userIdentity":[{"exists":false}]}`, `{"eventName":"REMOVE"}`, true, false},
		{"absent object with exists false", `{"userIdentity":{"type":[{"exists":false}]}}`, `{"eventName":"REMOVE"}`, true, false},
		{"anything-but", `{"eventName":[{"anything-but":["INSERT","MODIFY"]}]}`, ttl, true, false},
		{"anything-but hit", `{"eventName":[{"anything-but":"REMOVE"}]}`, ttl, false, false},
		{"anything-but prefix", `{"eventName":[{"anything-but":{"prefix":"REM"}}]}`, ttl, false, false},
		{"equals-ignore-case", `{"eventName":[{"equals-ignore-case":"remove"}]}`, ttl, true, false},
		{"numeric range", `{"detail":{"delta":[{"numeric":[">",0,"<=",100]}]}}`, `{"detail":{"delta":25}}`, true, false},
		{"numeric out of range", `{"detail":{"delta":[{"numeric":[">",0]}]}}`, `{"detail":{"delta":-3}}`, false, false},
		{"number literal", `{"detail":{"delta":[25]}}`, `{"detail":{"delta":25.0}}`, true, false},
		{"number is not a string", `{"detail":{"delta":["25"]}}`, `{"detail":{"delta":25}}`, false, false},
		{"array event value", `{"resources":[{"prefix":"arn:aws:events"}]}`, `{"resources":["x","arn:aws:events:us-east-1:1:rule/r"]}`, true, false},
		{"null literal", `{"a":[null]}`, `{"a":null}`, true, false},
		{"all fields must match", `{"eventName":["REMOVE"],"eventSource":["aws:kinesis"]}`, ttl, false, false},
		{"unsupported operator", `{"a":[{"wildcard":"x*"}]}`, `{"a":"xy"}`, false, true},
		{"scalar pattern value", `{"a":"x"}`, `{"a":"x"}`, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MatchPattern(tt.pattern, tt.event)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("MatchPattern = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestQueuesAndDestinations(t *testing.T) {
	tpl, _ := load(t)
	for _, f := range functions(t, tpl) {
		for _, e := range f.Events() {
			switch e.Type {
			case "SQS":
				refs, _ := References(e.Properties["Queue"], "Queue")
				if len(refs) != 1 {
					t.Fatalf("%s/%s: Queue must reference one queue", f.LogicalID, e.Name)
				}
				q := tpl.Resources[refs[0].Target].Properties
				vis, _ := q["VisibilityTimeout"].(int)
				if vis < 6*f.Timeout() {
					t.Errorf("%s: queue %s VisibilityTimeout %d < 6 x function timeout %d", f.LogicalID, refs[0].Target, vis, f.Timeout())
				}
				rp, _ := q["RedrivePolicy"].(map[string]any)
				if n, _ := rp["maxReceiveCount"].(int); n != 5 || rp["deadLetterTargetArn"] == nil {
					t.Errorf("%s: queue %s RedrivePolicy = %v, want a DLQ with maxReceiveCount 5", f.LogicalID, refs[0].Target, rp)
				}
				// SQS takes up to 1 MiB unless told; the processor dead-letters bodies over
				// shop.MaxBodyBytes, so the queue refuses them at send time instead.
				if n, _ := q["MaximumMessageSize"].(int); n != shop.MaxBodyBytes {
					t.Errorf("%s: queue %s MaximumMessageSize = %v, want %d (shop.MaxBodyBytes)", f.LogicalID, refs[0].Target, q["MaximumMessageSize"], shop.MaxBodyBytes)
				}
				if !slices.Contains(asList(e.Properties["FunctionResponseTypes"]), any("ReportBatchItemFailures")) {
					t.Errorf("%s/%s: no ReportBatchItemFailures", f.LogicalID, e.Name)
				}
			case "DynamoDB":
				p := e.Properties
				if p["BisectBatchOnFunctionError"] != true || p["StartingPosition"] != "TRIM_HORIZON" {
					t.Errorf("%s/%s: BisectBatchOnFunctionError/StartingPosition = %v/%v", f.LogicalID, e.Name, p["BisectBatchOnFunctionError"], p["StartingPosition"])
				}
				if _, ok := p["MaximumRetryAttempts"].(int); !ok {
					t.Errorf("%s/%s: MaximumRetryAttempts unset (the default retries until the record expires)", f.LogicalID, e.Name)
				}
				dc, _ := p["DestinationConfig"].(map[string]any)
				of, _ := dc["OnFailure"].(map[string]any)
				if of["Destination"] == nil || of["Type"] != "SQS" {
					t.Errorf("%s/%s: OnFailure destination = %v, want an SQS queue with Type SQS (so SAM grants sqs:SendMessage)", f.LogicalID, e.Name, of)
				}
				if !slices.Contains(asList(p["FunctionResponseTypes"]), any("ReportBatchItemFailures")) {
					t.Errorf("%s/%s: no ReportBatchItemFailures", f.LogicalID, e.Name)
				}
			case "EventBridgeRule":
				p := e.Properties
				if p["RetryPolicy"] == nil || p["DeadLetterConfig"] == nil {
					t.Errorf("%s/%s: RetryPolicy and DeadLetterConfig are required", f.LogicalID, e.Name)
				}
				of, _ := f.lookup("EventInvokeConfig/DestinationConfig/OnFailure").(map[string]any)
				if of["Destination"] == nil {
					t.Errorf("%s: no EventInvokeConfig OnFailure destination for asynchronous invocations", f.LogicalID)
				}
			}
		}
	}
}

func TestEventFilesHaveLambdaShapes(t *testing.T) {
	_, root := load(t)
	files, err := filepath.Glob(filepath.Join(root, "events", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no event files: %v", err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			ev := readJSON(t, file)
			switch {
			case strings.HasPrefix(name, "sqs-"):
				recs, _ := ev["Records"].([]any)
				if len(recs) == 0 {
					t.Fatal("no Records")
				}
				ids := map[string]bool{}
				for i, r := range recs {
					m := r.(map[string]any)
					for _, k := range []string{"messageId", "receiptHandle", "body", "attributes", "messageAttributes", "md5OfBody", "eventSource", "eventSourceARN", "awsRegion"} {
						if _, ok := m[k]; !ok {
							t.Errorf("record %d: no %s", i, k)
						}
					}
					body, _ := m["body"].(string)
					sum := md5.Sum([]byte(body))
					if m["md5OfBody"] != hex.EncodeToString(sum[:]) {
						t.Errorf("record %d: md5OfBody does not match the body", i)
					}
					if m["eventSource"] != "aws:sqs" {
						t.Errorf("record %d: eventSource %v", i, m["eventSource"])
					}
					id, _ := m["messageId"].(string)
					if ids[id] {
						t.Errorf("record %d: messageId %s repeated (partial batch responses name messages by id)", i, id)
					}
					ids[id] = true
				}
			case strings.HasPrefix(name, "dynamodb-"):
				recs, _ := ev["Records"].([]any)
				if len(recs) == 0 {
					t.Fatal("no Records")
				}
				for i, r := range recs {
					m := r.(map[string]any)
					d, _ := m["dynamodb"].(map[string]any)
					if m["eventSource"] != "aws:dynamodb" || d["Keys"] == nil || d["StreamViewType"] != "OLD_IMAGE" {
						t.Errorf("record %d is not a lock-table stream record: %v", i, m)
					}
					if m["eventName"] == "REMOVE" && d["OldImage"] == nil {
						t.Errorf("record %d: REMOVE without OldImage", i)
					}
				}
			case strings.HasPrefix(name, "eventbridge-"), strings.HasPrefix(name, "scheduled-"):
				for _, k := range []string{"version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"} {
					if _, ok := ev[k]; !ok {
						t.Errorf("no %s", k)
					}
				}
			case strings.HasPrefix(name, "seed-"):
				// Not an event: the stock cmd/invoke's -seed sets before an invocation.
				inv, _ := ev["inventory"].([]any)
				if len(inv) == 0 {
					t.Fatal("no inventory")
				}
				for i, it := range inv {
					m, _ := it.(map[string]any)
					if sku, _ := m["sku"].(string); sku == "" {
						t.Errorf("inventory[%d]: no sku", i)
					}
					if _, ok := m["available"].(float64); !ok {
						t.Errorf("inventory[%d]: available is not a number", i)
					}
				}
			case strings.HasPrefix(name, "env."):
				// Not an event: a sam local invoke --env-vars file (cmd/invoke's
				// TestDockerEnvVarsFile holds it to the template).
				if len(ev) == 0 {
					t.Fatal("no function sections")
				}
			default:
				t.Errorf("unknown event kind: add a shape check for %s", name)
			}
		})
	}
}

func TestValuesResolve(t *testing.T) {
	v := Values{
		Refs:  map[string]string{"Stage": "local", "LockTable": "turnstile-local-locks", "AWS::Region": "us-east-1"},
		Attrs: map[string]string{"OrdersQueue.Arn": "arn:aws:sqs:us-east-1:123456789012:orders"},
	}
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr bool
	}{
		{"string", `x`, "x", false},
		{"int", `3600`, "3600", false},
		{"bool", `true`, "true", false},
		{"ref", `!Ref LockTable`, "turnstile-local-locks", false},
		{"getatt", `!GetAtt OrdersQueue.Arn`, "arn:aws:sqs:us-east-1:123456789012:orders", false},
		{"sub", `!Sub "turnstile-${Stage}-${AWS::Region}-${!Literal}"`, "turnstile-local-us-east-1-${Literal}", false},
		{"sub attr", `!Sub "${OrdersQueue.Arn}/x"`, "arn:aws:sqs:us-east-1:123456789012:orders/x", false},
		{"sub list", `!Sub ["${a}-${Stage}", {a: !Ref LockTable}]`, "turnstile-local-locks-local", false},
		{"join", `!Join ["-", [a, !Ref Stage]]`, "a-local", false},
		{"unknown ref", `!Ref Nope`, "", true},
		{"unknown sub", `!Sub "${Nope}"`, "", true},
		{"unsupported", `!Select [0, [a]]`, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := template.Decode([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Resolve(x)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestGlobalsMerge(t *testing.T) {
	doc := `
Globals:
  Function:
    Runtime: provided.al2023
    Timeout: 30
    Environment: {Variables: {STAGE: !Ref Stage, SHARED: g}}
    LoggingConfig: {LogFormat: JSON}
Resources:
  AFunction:
    Type: AWS::Serverless::Function
    Metadata: {BuildMethod: makefile}
    Properties:
      Timeout: 60
      Environment: {Variables: {SHARED: f, OWN: x}}
`
	tpl, err := template.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	f, err := LookupFunction(tpl, "AFunction")
	if err != nil {
		t.Fatal(err)
	}
	if f.Timeout() != 60 || f.String("Runtime") != "provided.al2023" || f.String("LoggingConfig/LogFormat") != "JSON" {
		t.Errorf("merged properties = %v", f.Properties)
	}
	env := f.Environment()
	if len(env) != 3 || env["SHARED"] != "f" || env["OWN"] != "x" {
		t.Errorf("environment = %v", env)
	}
	if f.Metadata["BuildMethod"] != "makefile" || f.SourceDir() != "functions/a" {
		t.Errorf("metadata %v, dir %s", f.Metadata, f.SourceDir())
	}
	if _, err := LookupFunction(tpl, "Nope"); err == nil {
		t.Error("LookupFunction of a missing id succeeded")
	}
}

// TestGlobalsListsAreAdditive: SAM prepends a Globals list to the function's own list
// instead of replacing it (samtranslator Globals._merge_lists: global + local). A function
// that names Architectures: [x86_64] under Globals [arm64] is deployed with
// [arm64, x86_64], which CloudFormation rejects (at most one architecture); the runtime
// settings test must see that list, not [x86_64].
func TestGlobalsListsAreAdditive(t *testing.T) {
	doc := `
Globals:
  Function:
    Architectures: [arm64]
    Layers: [!Ref SharedLayer]
    VpcConfig: {SecurityGroupIds: [sg-1], SubnetIds: [subnet-1]}
    Environment: !If [C, {Variables: {A: a}}, !Ref AWS::NoValue]
Resources:
  AFunction:
    Type: AWS::Serverless::Function
    Properties:
      Architectures: [x86_64]
      Layers: [!Ref OwnLayer]
      VpcConfig: {SecurityGroupIds: [sg-2]}
      Environment: {Variables: {B: b}}
  BFunction:
    Type: AWS::Serverless::Function
    Properties: {}
`
	tpl, err := template.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a, err := LookupFunction(tpl, "AFunction")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Architectures(); !slices.Equal(got, []string{"arm64", "x86_64"}) {
		t.Errorf("Architectures = %v, want [arm64 x86_64] (Globals first)", got)
	}
	layers, _ := a.Properties["Layers"].([]any)
	if len(layers) != 2 {
		t.Errorf("Layers = %v, want the global layer then the function's", a.Properties["Layers"])
	}
	sgs, _ := a.lookup("VpcConfig/SecurityGroupIds").([]any)
	if !slices.Equal(sgs, []any{"sg-1", "sg-2"}) || a.lookup("VpcConfig/SubnetIds") == nil {
		t.Errorf("VpcConfig = %v, want SecurityGroupIds [sg-1 sg-2] and the global SubnetIds", a.Properties["VpcConfig"])
	}
	// An intrinsic is a scalar to SAM: the function's mapping replaces it.
	if env, _ := a.Properties["Environment"].(map[string]any); len(env) != 1 || a.Environment()["B"] != "b" {
		t.Errorf("Environment = %v, want the function's only (the global one is an intrinsic)", a.Properties["Environment"])
	}
	b, err := LookupFunction(tpl, "BFunction")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Architectures(); !slices.Equal(got, []string{"arm64"}) {
		t.Errorf("BFunction Architectures = %v, want [arm64]", got)
	}
	// Merging must not write into the Globals' lists.
	if g := tpl.Globals["Function"].(map[string]any)["Architectures"].([]any); len(g) != 1 {
		t.Errorf("Globals Architectures changed to %v", g)
	}
}

func TestLocalEnvironment(t *testing.T) {
	tpl, _ := load(t)
	v, err := Local{
		QueueEndpoint: "http://127.0.0.1:9324",
		TableNames:    map[string]string{"OrdersTable": "orders-test-1a2b"},
	}.Values(tpl)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		fn   string
		want map[string]string
	}{
		{"OrderProcessorFunction", map[string]string{
			"LOCK_TABLE": "", "ORDERS_TABLE": "orders-test-1a2b",
			"INVENTORY_TABLE": "turnstile-local-inventory", "STAGE": "local",
		}},
		{"InventoryUpdaterFunction", map[string]string{
			"LOCK_TABLE": "", "INVENTORY_TABLE": "turnstile-local-inventory",
		}},
		{"JanitorFunction", map[string]string{
			"LOCK_TABLE": "turnstile-local-locks", "ORDERS_TABLE": "orders-test-1a2b",
			"INVENTORY_TABLE":  "turnstile-local-inventory",
			"ORDERS_QUEUE_URL": "http://127.0.0.1:9324/123456789012/turnstile-local-orders",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			f, err := LookupFunction(tpl, tt.fn)
			if err != nil {
				t.Fatal(err)
			}
			env, err := f.ResolveEnvironment(v)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tt.want {
				if env[k] != want {
					t.Errorf("%s = %q, want %q", k, env[k], want)
				}
			}
		})
	}
	if got := v.Attrs["LockTable.StreamArn"]; !strings.HasPrefix(got, "arn:aws:dynamodb:us-east-1:123456789012:table/turnstile-local-locks/stream/") {
		t.Errorf("LockTable.StreamArn = %q", got)
	}
}

// TestEventBridgeDeadLetterQueuePolicy: EventBridge can deliver to a rule's dead-letter
// queue only when the queue's policy lets events.amazonaws.com send on behalf of that rule.
func TestEventBridgeDeadLetterQueuePolicy(t *testing.T) {
	tpl, _ := load(t)
	vals, err := Local{}.Values(tpl)
	if err != nil {
		t.Fatal(err)
	}
	stmts, _ := PolicyStatements(tpl)
	found := 0
	for _, f := range functions(t, tpl) {
		for _, e := range f.Events() {
			if e.Type != "EventBridgeRule" {
				continue
			}
			found++
			dlc, _ := e.Properties["DeadLetterConfig"].(map[string]any)
			refs, _ := References(dlc["Arn"], "DeadLetterConfig/Arn")
			if len(refs) != 1 {
				t.Fatalf("%s/%s: DeadLetterConfig.Arn must reference one queue", f.LogicalID, e.Name)
			}
			queue := refs[0].Target
			bus, err := vals.Resolve(e.Properties["EventBusName"])
			if err != nil {
				t.Fatal(err)
			}
			rule, err := vals.Resolve(e.Properties["RuleName"])
			if err != nil {
				t.Fatalf("%s/%s: RuleName must be set so the queue policy can name the rule: %v", f.LogicalID, e.Name, err)
			}
			wantArn := "arn:aws:events:us-east-1:123456789012:rule/" + bus + "/" + rule
			ok := false
			for _, s := range stmts {
				pol := tpl.Resources[s.Owner]
				if pol.Type != "AWS::SQS::QueuePolicy" {
					continue
				}
				qrefs, _ := References(pol.Properties["Queues"], "Queues")
				if len(qrefs) == 0 || qrefs[0].Target != queue {
					continue
				}
				principal, _ := s.Raw["Principal"].(map[string]any)
				cond, _ := s.Raw["Condition"].(map[string]any)
				arnEq, _ := cond["ArnEquals"].(map[string]any)
				src, err := vals.Resolve(arnEq["aws:SourceArn"])
				if err == nil && principal["Service"] == "events.amazonaws.com" && src == wantArn &&
					slices.Contains(s.Actions, any("sqs:SendMessage")) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s/%s: no QueuePolicy on %s lets events.amazonaws.com sqs:SendMessage with aws:SourceArn %s", f.LogicalID, e.Name, queue, wantArn)
			}
		}
	}
	if found == 0 {
		t.Fatal("no EventBridgeRule events found")
	}
}
