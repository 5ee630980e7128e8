package b_test
