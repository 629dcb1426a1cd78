"""Tools for developers: throwaway servers for tests and benchmarks."""
