package handler_test

import (
	"slices"
	"testing"

	"github.com/turnstile-locks/turnstile/functions/janitor/handler"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

// A SKU lease taken for an SQS batch names every order of its group; the janitor resumes
// each of them.
func TestOrderIDsOfABatchLease(t *testing.T) {
	data := []byte("ord-1" + shop.BatchDataSeparator + "ord-2" + shop.BatchDataSeparator + "ord-3")
	if got := handler.OrderIDsOf(shop.SKULockKey("MUG-RED-350"), data); !slices.Equal(got, []string{"ord-1", "ord-2", "ord-3"}) {
		t.Errorf("OrderIDsOf(batch lease) = %q", got)
	}
	if got := handler.OrderIDOf(shop.SKULockKey("MUG-RED-350"), data); got != "ord-1" {
		t.Errorf("OrderIDOf(batch lease) = %q, want the first", got)
	}
	if got := handler.OrderIDsOf(shop.SKULockKey("MUG-RED-350"), []byte("ord-9")); !slices.Equal(got, []string{"ord-9"}) {
		t.Errorf("OrderIDsOf(single) = %q", got)
	}
	if got := handler.OrderIDsOf(shop.SKULockKey("MUG-RED-350"), nil); len(got) != 0 {
		t.Errorf("OrderIDsOf(no data) = %q", got)
	}
}
