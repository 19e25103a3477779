package main

import (
	"context"
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

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
)

// stackOutputLockTable is the template.yaml output naming the lock table.
const stackOutputLockTable = "LockTableName"

// dynamo returns a DynamoDB client: for a loopback endpoint (DynamoDB Local, `make
// engine`) one with local static credentials that reads nothing from ~/.aws; otherwise
// one from the default AWS configuration, pointed at --endpoint when given.
func (c *cli) dynamo(ctx context.Context) (*dynamodb.Client, error) {
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
			return dynamodb.NewFromConfig(cfg), nil
		}
	}
	cfg, err := awsConfig(ctx, c.region)
	if err != nil {
		return nil, err
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if ep != "" {
			o.BaseEndpoint = aws.String(ep)
		}
	}), nil
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
