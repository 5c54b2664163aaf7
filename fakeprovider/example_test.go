package fakeprovider_test

import (
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/idemkit/idemkit/fakeprovider"
)

// A fake Stripe: the retry with the same key is a replay, the same key
// with another amount is refused.
func Example() {
	fake, err := fakeprovider.New("stripe", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer fake.Close()
	charge := func(body string) {
		req, _ := http.NewRequest(http.MethodPost, fake.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test_123")
		req.Header.Set("Idempotency-Key", "order-1234")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, "replayed:", resp.Header.Get("Idempotent-Replayed") == "true")
	}
	charge(`{"amount": 4000}`)
	charge(`{"amount": 4000}`)
	charge(`{"amount": 5000}`)
	fmt.Println("executions:", fake.Executions())
	// Output:
	// 200 replayed: false
	// 200 replayed: true
	// 400 replayed: false
	// executions: 1
}
