package sqlstore

import (
	"errors"
	"fmt"
	"reflect"
)

// ConfigWithDefaults returns a copy of *c (of the zero T when c is nil)
// whose zero fields are set to those of defaults: the WithDefaults of a
// driver's Config.
func ConfigWithDefaults[T any](c *T, defaults T) *T {
	var out T
	if c != nil {
		out = *c
	}
	v, d := reflect.ValueOf(&out).Elem(), reflect.ValueOf(defaults)
	for i := range v.NumField() {
		if f := v.Field(i); f.CanSet() && f.IsZero() {
			f.Set(d.Field(i))
		}
	}
	return &out
}

// CheckNotNegative returns an error naming every integer or duration
// field of the struct *c that is negative; the message starts with
// prefix (e.g. "idemkit/server/pgstore: Config").
func CheckNotNegative(prefix string, c any) error {
	v := reflect.ValueOf(c).Elem()
	var errs []error
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if f.Int() < 0 {
				errs = append(errs, fmt.Errorf("%s.%s must not be negative, got %v", prefix, v.Type().Field(i).Name, f.Interface()))
			}
		}
	}
	return errors.Join(errs...)
}
