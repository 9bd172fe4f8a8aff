import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly', console: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly',
        setImmediate: 'readonly', URL: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly',
        performance: 'readonly', Buffer: 'readonly', TextEncoder: 'readonly', TextDecoder: 'readonly',
        queueMicrotask: 'readonly', structuredClone: 'readonly', fetch: 'readonly', Response: 'readonly',
        Request: 'readonly', Headers: 'readonly', setInterval: 'readonly', clearInterval: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  {
    // The decision core is pure: no clocks, no randomness, no I/O, no Node modules.
    files: ['src/core/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: ['node:*', '../*', 'undici', 'fs', 'http', 'https', 'net'] }],
      'no-restricted-globals': ['error', 'setTimeout', 'setInterval', 'setImmediate', 'performance', 'process', 'fetch'],
      'no-restricted-properties': ['error',
        { object: 'Date', property: 'now', message: 'The core takes time as an argument.' },
        { object: 'Math', property: 'random', message: 'The core takes randomness as an argument.' }],
    },
  },
);
