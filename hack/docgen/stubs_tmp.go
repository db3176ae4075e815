package main

func v1CheckPages(string) ([]page, error)     { return nil, nil }
func algorithmPages(string) ([]page, error)   { return nil, nil }
func performancePages(string) ([]page, error) { return nil, nil }
