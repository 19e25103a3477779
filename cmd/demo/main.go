// Command demo creates the tables of template.yaml on a local DynamoDB engine and reports
// what it created. It starts (and afterwards stops) DynamoDB Local unless DYNAMODB_ENDPOINT
// names a running engine, in which case the tables it created are deleted again.
//
// This is a placeholder for the full demo.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/template"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	endpoint := os.Getenv(ddblocal.EnvEndpoint)
	external := endpoint != ""
	if external {
		fmt.Printf("engine: %s (from %s)\n", endpoint, ddblocal.EnvEndpoint)
	} else {
		fmt.Println("engine: starting DynamoDB Local ...")
		engine, err := ddblocal.Start(ctx, ddblocal.Options{})
		if err != nil {
			return err
		}
		defer func() {
			if stopErr := engine.Stop(); stopErr != nil && err == nil {
				err = fmt.Errorf("stop engine: %w", stopErr)
			}
			fmt.Printf("engine: stopped (pid %d)\n", engine.PID())
		}()
		endpoint = engine.Endpoint()
		fmt.Printf("engine: %s (pid %d)\n", endpoint, engine.PID())
	}

	client, err := ddblocal.NewClient(ctx, endpoint)
	if err != nil {
		return err
	}
	tpl, err := template.LoadDefault()
	if err != nil {
		return err
	}
	specs, err := tpl.Tables()
	if err != nil {
		return err
	}
	suffix := randomHex(4)
	for _, spec := range specs {
		name := fmt.Sprintf("demo-%s-%s", spec.LogicalID, suffix)
		if err := ddblocal.CreateTable(ctx, client, spec.CreateTableInput(name), spec.TTLInput(name)); err != nil {
			return err
		}
		if external {
			defer func() {
				dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, delErr := client.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); delErr != nil && err == nil {
					err = fmt.Errorf("delete table %s: %w", name, delErr)
				}
			}()
		}
		desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describe %s: %w", name, err)
		}
		fmt.Printf("table %-14s -> %s\n", spec.LogicalID, name)
		fmt.Printf("  keys:   %s\n", describeKeys(spec))
		fmt.Printf("  status: %s, billing %s\n", desc.Table.TableStatus, billing(desc.Table))
		if spec.TTLAttribute != "" {
			fmt.Printf("  ttl:    %s\n", spec.TTLAttribute)
		} else {
			fmt.Println("  ttl:    none")
		}
		if ss := desc.Table.StreamSpecification; ss != nil && aws.ToBool(ss.StreamEnabled) {
			fmt.Printf("  stream: %s %s\n", ss.StreamViewType, aws.ToString(desc.Table.LatestStreamArn))
		} else {
			fmt.Println("  stream: none")
		}
	}
	fmt.Printf("created %d tables from %s\n", len(specs), tpl.Path)
	return nil
}

func describeKeys(spec template.TableSpec) string {
	attrTypes := map[string]string{}
	for _, d := range spec.AttributeDefinitions {
		attrTypes[aws.ToString(d.AttributeName)] = string(d.AttributeType)
	}
	var parts []string
	for _, k := range spec.KeySchema {
		n := aws.ToString(k.AttributeName)
		parts = append(parts, fmt.Sprintf("%s %s (%s)", n, k.KeyType, attrTypes[n]))
	}
	return strings.Join(parts, ", ")
}

func billing(td *dtypes.TableDescription) string {
	if td.BillingModeSummary != nil {
		return string(td.BillingModeSummary.BillingMode)
	}
	return "PAY_PER_REQUEST"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
