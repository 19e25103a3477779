package stack

import (
	"fmt"
	"sort"
	"strings"

	"github.com/turnstile-locks/turnstile/internal/template"
)

// Local describes a local stand-in of the stack, for resolving the template's intrinsic
// functions outside AWS (see Values).
type Local struct {
	// Parameters override parameter defaults; Stage defaults to "local".
	Parameters map[string]string
	// Region and AccountID fill the pseudo parameters (default us-east-1, 123456789012).
	Region    string
	AccountID string
	// StackName fills AWS::StackName (default "turnstile-<Stage>").
	StackName string
	// QueueEndpoint is the base URL of the local SQS stand-in, e.g. http://127.0.0.1:9324;
	// queue URLs become <QueueEndpoint>/<AccountID>/<QueueName>. Empty: the regional AWS
	// endpoint.
	QueueEndpoint string
	// TableNames override table names by logical id (for example unique names per test).
	TableNames map[string]string
	// StreamArns give the real stream ARNs of local tables by logical id.
	StreamArns map[string]string
}

// nameProperty is the property that names a resource of each type.
var nameProperty = map[string]string{
	"AWS::DynamoDB::Table":      "TableName",
	"AWS::SQS::Queue":           "QueueName",
	"AWS::Events::EventBus":     "Name",
	"AWS::Serverless::Function": "FunctionName",
	"AWS::Lambda::Function":     "FunctionName",
}

// Values returns what Ref and Fn::GetAtt stand for in the local stand-in: parameters (their
// defaults, overridden by l.Parameters), pseudo parameters, and the names, ARNs and URLs of
// tables, queues, event buses and functions. A resource without an explicit name is named
// <StackName>-<LogicalId>.
func (l Local) Values(t *template.Template) (Values, error) {
	region, account := l.Region, l.AccountID
	if region == "" {
		region = "us-east-1"
	}
	if account == "" {
		account = "123456789012"
	}
	v := Values{Refs: ParameterDefaults(t), Attrs: map[string]string{}}
	if _, ok := t.Parameters["Stage"]; ok || l.Parameters["Stage"] != "" {
		v.Refs["Stage"] = "local"
	}
	for k, val := range l.Parameters {
		v.Refs[k] = val
	}
	stackName := l.StackName
	if stackName == "" {
		stackName = "turnstile-" + v.Refs["Stage"]
		if v.Refs["Stage"] == "" {
			stackName = "turnstile-local"
		}
	}
	for k, val := range map[string]string{
		"AWS::Region": region, "AWS::AccountId": account, "AWS::Partition": "aws",
		"AWS::StackName": stackName, "AWS::URLSuffix": "amazonaws.com",
		"AWS::StackId": fmt.Sprintf("arn:aws:cloudformation:%s:%s:stack/%s/00000000-0000-0000-0000-000000000000", region, account, stackName),
	} {
		v.Refs[k] = val
	}
	queueBase := strings.TrimSuffix(l.QueueEndpoint, "/")
	if queueBase == "" {
		queueBase = "https://sqs." + region + ".amazonaws.com"
	}

	ids := make([]string, 0, len(t.Resources))
	for id := range t.Resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := t.Resources[id]
		name := stackName + "-" + id
		if p, ok := nameProperty[r.Type]; ok && r.Properties[p] != nil {
			n, err := v.Resolve(r.Properties[p])
			if err != nil {
				return Values{}, fmt.Errorf("resource %s: %s: %w", id, p, err)
			}
			name = n
		}
		switch r.Type {
		case "AWS::DynamoDB::Table":
			if n := l.TableNames[id]; n != "" {
				name = n
			}
			arn := fmt.Sprintf("arn:aws:dynamodb:%s:%s:table/%s", region, account, name)
			stream := l.StreamArns[id]
			if stream == "" {
				stream = arn + "/stream/1970-01-01T00:00:00.000"
			}
			v.Refs[id] = name
			v.Attrs[id+".Arn"] = arn
			v.Attrs[id+".StreamArn"] = stream
		case "AWS::SQS::Queue":
			url := queueBase + "/" + account + "/" + name
			v.Refs[id] = url
			v.Attrs[id+".Arn"] = fmt.Sprintf("arn:aws:sqs:%s:%s:%s", region, account, name)
			v.Attrs[id+".QueueName"] = name
			v.Attrs[id+".QueueUrl"] = url
		case "AWS::Events::EventBus":
			v.Refs[id] = name
			v.Attrs[id+".Name"] = name
			v.Attrs[id+".Arn"] = fmt.Sprintf("arn:aws:events:%s:%s:event-bus/%s", region, account, name)
		case "AWS::Serverless::Function", "AWS::Lambda::Function":
			v.Refs[id] = name
			v.Attrs[id+".Arn"] = fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", region, account, name)
		default:
			v.Refs[id] = id
		}
	}
	return v, nil
}

// ResolveEnvironment returns the function's environment variables with their intrinsic
// functions resolved by v.
func (f Function) ResolveEnvironment(v Values) (map[string]string, error) {
	out := map[string]string{}
	for k, x := range f.Environment() {
		s, err := v.Resolve(x)
		if err != nil {
			return nil, fmt.Errorf("%s: environment variable %s: %w", f.LogicalID, k, err)
		}
		out[k] = s
	}
	return out, nil
}
