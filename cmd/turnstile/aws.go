package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// stackOutputLockTable is the template.yaml output naming the lock table.
const stackOutputLockTable = "LockTableName"

// dynamo returns a DynamoDB client: for a loopback endpoint (DynamoDB Local, `make
// engine`) one with local static credentials that reads nothing from ~/.aws; otherwise
// one from the default AWS configuration, pointed at --endpoint when given.
func (c *cli) dynamo(ctx context.Context) (*dynamodb.Client, error) {
	if c.db != nil {
		return c.db, nil
	}
	ep := c.endpointURL()
	if ep != "" {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, usagef("--endpoint: want a URL such as http://127.0.0.1:8000, got %q", ep)
		}
		if isLoopback(ep) {
			cfg := ddblocal.Config(ep)
			if c.region != "" {
				cfg.Region = c.region
			}
			c.db, c.where = dynamodb.NewFromConfig(cfg), ep
			return c.db, nil
		}
	}
	cfg, err := awsConfig(ctx, c.region)
	if err != nil {
		return nil, err
	}
	c.where = "AWS region " + cfg.Region
	if ep != "" {
		c.where = ep + " (region " + cfg.Region + ")"
	}
	c.db = dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if ep != "" {
			o.BaseEndpoint = aws.String(ep)
		}
	})
	return c.db, nil
}

// lockKeySchema is the lock table's key schema as messages name it: "pk (HASH, string),
// sk (RANGE, string)" unless --attributes names other keys.
func (c *cli) lockKeySchema() string {
	a, err := c.tableAttributes()
	if err != nil {
		a = lockcore.DefaultTableAttributes
	}
	return fmt.Sprintf("%s (HASH, string), %s (RANGE, string)", a.PartitionKey, a.SortKey)
}

// checkLockTable makes sure the lock table exists and has the lock table's keys, before
// a listing: a Scan of a table with other keys does not fail, it only finds no locks
// (or stops at a position it cannot continue from). It needs dynamodb:DescribeTable;
// without that permission (or any other refusal) it checks nothing and the reads speak
// for themselves.
func (c *cli) checkLockTable(ctx context.Context, table string) error {
	t, err := c.describe(ctx, table)
	var nf *types.ResourceNotFoundException
	var api smithy.APIError
	switch {
	case errors.As(err, &nf):
		return c.notFound(table)
	case errors.As(err, &api):
		return nil
	case err != nil:
		return fmt.Errorf("table %s at %s: %w", table, c.where, err)
	}
	if keys := keySchema(t); keys != c.lockKeySchema() {
		return c.notLockTable(table, keys)
	}
	return nil
}

func (c *cli) describe(ctx context.Context, table string) (*types.TableDescription, error) {
	db, err := c.dynamo(ctx)
	if err != nil {
		return nil, err
	}
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return nil, err
	}
	return out.Table, nil
}

// keySchema describes a table's primary key: "pk (HASH, string), sk (RANGE, string)".
func keySchema(t *types.TableDescription) string {
	if t == nil {
		return "unknown"
	}
	typ := map[string]string{}
	for _, d := range t.AttributeDefinitions {
		typ[aws.ToString(d.AttributeName)] = map[types.ScalarAttributeType]string{
			types.ScalarAttributeTypeS: "string", types.ScalarAttributeTypeN: "number", types.ScalarAttributeTypeB: "binary",
		}[d.AttributeType]
	}
	ks := slices.Clone(t.KeySchema)
	slices.SortStableFunc(ks, func(a, b types.KeySchemaElement) int { // HASH first
		return strings.Compare(string(a.KeyType), string(b.KeyType))
	})
	var parts []string
	for _, k := range ks {
		n := aws.ToString(k.AttributeName)
		parts = append(parts, fmt.Sprintf("%s (%s, %s)", n, k.KeyType, typ[n]))
	}
	return strings.Join(parts, ", ")
}

// from says where the table name came from, for a hint.
func (c *cli) from(table string) string {
	switch {
	case !c.targetIsLocks && table == c.itemTable:
		return "--item-table"
	case c.tableFrom != "":
		return c.tableFrom
	}
	return "--table"
}

func (c *cli) notFound(table string) error {
	return fmt.Errorf("table %s not found at %s\n"+
		"hint: the name came from %s; check it, and --endpoint / --region (a table lives in one account and region; "+
		"the application's stack names its lock table in its %s output: --stack NAME)", table, c.where, c.from(table), stackOutputLockTable)
}

func (c *cli) notLockTable(table, keys string) error {
	return fmt.Errorf("table %s at %s is not a lock table: its key schema is %s; a lock table's is %s\n"+
		"hint: the name came from %s; lockcore.CreateLockTable (or template.yaml's LockTable) makes lock tables "+
		"(a lock table with other key names: --attributes PK,SK,TTL)",
		table, c.where, keys, c.lockKeySchema(), c.from(table))
}

// explain turns DynamoDB's errors about the table itself into messages that say what
// is wrong: a missing table (ResourceNotFoundException) and a table whose keys are not
// the lock table's (or, for show --strategy item, not KEY's attributes:
// ValidationException).
func (c *cli) explain(ctx context.Context, err error) error {
	if c.target == "" || err == nil {
		return err
	}
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return c.notFound(c.target)
	}
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" {
		return err
	}
	keys := "unknown (dynamodb:DescribeTable failed)"
	if t, derr := c.describe(ctx, c.target); derr == nil {
		keys = keySchema(t)
	}
	if c.targetIsLocks {
		if keys == c.lockKeySchema() {
			return err // the keys are right: something else
		}
		return fmt.Errorf("%w\n(DynamoDB: %s)", c.notLockTable(c.target, keys), api.ErrorMessage())
	}
	return fmt.Errorf("KEY %s is not the primary key of table %s at %s, whose key schema is %s (DynamoDB: %s)",
		c.key(), c.target, c.where, keys, api.ErrorMessage())
}

func awsConfig(ctx context.Context, region string) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if region != "" {
		opts = append(opts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, usagef("--region: no AWS region configured (set --region, AWS_REGION or a profile's region)")
	}
	return cfg, nil
}

// isLoopback reports whether the endpoint's host is localhost or a loopback address.
func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cloudFormationOutputs returns a stack's outputs by key (DescribeStacks).
func cloudFormationOutputs(ctx context.Context, stack, region string) (map[string]string, error) {
	cfg, err := awsConfig(ctx, region)
	if err != nil {
		return nil, err
	}
	out, err := cloudformation.NewFromConfig(cfg).DescribeStacks(ctx, &cloudformation.DescribeStacksInput{StackName: aws.String(stack)})
	if err != nil {
		return nil, err
	}
	if len(out.Stacks) == 0 {
		return nil, fmt.Errorf("stack not found")
	}
	outs := map[string]string{}
	for _, o := range out.Stacks[0].Outputs {
		outs[aws.ToString(o.OutputKey)] = aws.ToString(o.OutputValue)
	}
	return outs, nil
}

// stsCallerARN returns the ARN of the caller's AWS identity.
func stsCallerARN(ctx context.Context, _ /* endpoint: DynamoDB's, not STS's */, region string) (string, error) {
	cfg, err := awsConfig(ctx, region)
	if err != nil {
		return "", err
	}
	out, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return "", err
	}
	return aws.ToString(out.Arn), nil
}

// parseItemKey parses ATTR=VALUE[,ATTR=VALUE] into a primary key of string attributes.
func parseItemKey(s string) (map[string]types.AttributeValue, error) {
	key := map[string]types.AttributeValue{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" || v == "" {
			return nil, usagef("KEY: with --strategy item, want ATTR=VALUE[,ATTR=VALUE] (the item's primary key), got %q", s)
		}
		key[k] = &types.AttributeValueMemberS{Value: v}
	}
	return key, nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
