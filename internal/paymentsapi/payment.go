package paymentsapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Payment is one row of the ledger: the JSON body of a 201 from POST
// /v1/payments and of each element of GET /v1/payments.
type Payment struct {
	ID          string    `json:"id"`
	Account     string    `json:"account"`
	Amount      int64     `json:"amount"`
	Currency    string    `json:"currency"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
}

// sameRequest reports whether p and q carry the same payment request
// (account, amount, currency, description), whatever their id and time.
func (p Payment) sameRequest(q Payment) bool {
	return p.Account == q.Account && p.Amount == q.Amount && p.Currency == q.Currency && p.Description == q.Description
}

const (
	// maxPaymentBodyBytes bounds the request body the handler decodes.
	maxPaymentBodyBytes = 64 << 10
	// maxDescriptionRunes bounds the optional description.
	maxDescriptionRunes = 500
)

// errInvalidPayment is wrapped by every error decodePayment returns.
var errInvalidPayment = errors.New("invalid payment")

// paymentRequest is the body of POST /v1/payments.
type paymentRequest struct {
	Amount      int64
	Currency    string
	Description string
}

// decodePayment parses and validates a POST /v1/payments body:
// {"amount": positive integer (minor units), "currency": three letters,
// "description": optional string}. Unknown fields, trailing data and any
// other amount spelling (1.0, 1e2, "100") are rejected. The currency is
// returned in upper case.
func decodePayment(body io.Reader) (paymentRequest, error) {
	var raw struct {
		Amount      json.RawMessage `json:"amount"`
		Currency    *string         `json:"currency"`
		Description *string         `json:"description"`
	}
	data, err := io.ReadAll(io.LimitReader(body, maxPaymentBodyBytes+1))
	if err != nil {
		return paymentRequest{}, fmt.Errorf("%w: the body could not be read", errInvalidPayment)
	}
	if len(data) > maxPaymentBodyBytes {
		return paymentRequest{}, fmt.Errorf("%w: the body is larger than %d bytes", errInvalidPayment, maxPaymentBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return paymentRequest{}, fmt.Errorf("%w: the body is not a JSON object of amount, currency and description: %s", errInvalidPayment, jsonErrorText(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return paymentRequest{}, fmt.Errorf("%w: unexpected data after the JSON object", errInvalidPayment)
	}

	var p paymentRequest
	amount := string(raw.Amount)
	if amount == "" || amount == "null" {
		return paymentRequest{}, fmt.Errorf("%w: amount is required", errInvalidPayment)
	}
	if strings.Trim(amount, "0123456789") != "" {
		return paymentRequest{}, fmt.Errorf("%w: amount must be a positive integer number of minor units, got %s", errInvalidPayment, truncate(amount, 40))
	}
	p.Amount, err = strconv.ParseInt(amount, 10, 64)
	if err != nil || p.Amount <= 0 {
		return paymentRequest{}, fmt.Errorf("%w: amount must be a positive integer number of minor units, at most %d, got %s", errInvalidPayment, int64(1<<63-1), truncate(amount, 40))
	}

	if raw.Currency == nil {
		return paymentRequest{}, fmt.Errorf("%w: currency is required", errInvalidPayment)
	}
	if !isThreeLetters(*raw.Currency) {
		return paymentRequest{}, fmt.Errorf("%w: currency must be three letters (ISO 4217, e.g. USD), got %q", errInvalidPayment, truncate(*raw.Currency, 40))
	}
	p.Currency = strings.ToUpper(*raw.Currency)

	if raw.Description != nil {
		p.Description = *raw.Description
	}
	if n := utf8.RuneCountInString(p.Description); n > maxDescriptionRunes {
		return paymentRequest{}, fmt.Errorf("%w: description must be at most %d characters, got %d", errInvalidPayment, maxDescriptionRunes, n)
	}
	return p, nil
}

func isThreeLetters(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range len(s) {
		c := s[i] | 0x20 // ASCII lower case
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// jsonErrorText describes a decoding error without echoing large inputs.
func jsonErrorText(err error) string {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return fmt.Sprintf("field %q has the wrong type (%s)", ute.Field, ute.Value)
	}
	if errors.Is(err, io.EOF) {
		return "the body is empty"
	}
	return truncate(err.Error(), 200)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
