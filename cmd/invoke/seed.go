package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/stack"
)

// seedFile is the format of SEED files (events/seed-inventory.json): the available stock
// to set per SKU before the invocation.
type seedFile struct {
	Inventory []struct {
		SKU       *string `json:"sku"`
		Available *int    `json:"available"`
	} `json:"inventory"`
}

// seed sets the stock of a seed file in the local stack's inventory table, through the
// service the functions use (under the SKU locks).
func seed(ctx context.Context, path, endpoint string, vals stack.Values, stderr io.Writer) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the seed file: %w", err)
	}
	var f seedFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields() // a local file: a typo should be reported, not ignored
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("seed file %s: want {\"inventory\": [{\"sku\": \"MUG-RED-350\", \"available\": 40}, ...]}: %w", path, err)
	}
	if len(f.Inventory) == 0 {
		return fmt.Errorf("seed file %s: inventory is empty", path)
	}
	client, err := ddblocal.NewClient(ctx, endpoint)
	if err != nil {
		return err
	}
	svc, err := shop.NewService(client, shop.Tables{
		Locks: vals.Refs["LockTable"], Orders: vals.Refs["OrdersTable"], Inventory: vals.Refs["InventoryTable"],
	}, shop.WithOwner("invoke-seed"))
	if err != nil {
		return err
	}
	for i, it := range f.Inventory {
		switch {
		case it.SKU == nil:
			return fmt.Errorf("seed file %s: inventory[%d].sku is required", path, i)
		case it.Available == nil:
			return fmt.Errorf("seed file %s: inventory[%d].available is required", path, i)
		}
		if err := svc.SeedStock(ctx, *it.SKU, *it.Available); err != nil {
			return fmt.Errorf("seed file %s: inventory[%d]: %w", path, i, err)
		}
		fmt.Fprintf(stderr, "invoke: seeded %s: %d available\n", *it.SKU, *it.Available)
	}
	return nil
}
