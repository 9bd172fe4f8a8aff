import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// The layers (DESIGN.md): core ← presets ← shared ← run ← drivers ← cli. Dependencies point
// down; a driver never imports another driver (what two share moves down, to core or
// shared). The one exception: the exchange (rtb) uses the delivery queue through its
// public entry point. `testing` is an entry point for users (the test clock lives in shared).
const DRIVERS = ['http', 'server', 'fleet', 'telemetry', 'rtb', 'delivery', 'sim', 'report'];
const above = (folders) => folders.flatMap((f) => [`../${f}/*`, `../${f}/**`]);
const layerRule = (own, allowed = [], alsoAbove = []) => [
  'error',
  {
    patterns: [
      {
        group: [...above([...DRIVERS.filter((d) => d !== own), 'cli', 'testing', ...alsoAbove]), ...allowed.map((a) => `!${a}`)],
        message: 'A sideways or upward import: drivers build on core, presets, shared and run only (move what two drivers share down to core or shared).',
      },
    ],
  },
];

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setImmediate: 'readonly',
        URL: 'readonly',
        AbortController: 'readonly',
        AbortSignal: 'readonly',
        performance: 'readonly',
        Buffer: 'readonly',
        TextEncoder: 'readonly',
        TextDecoder: 'readonly',
        queueMicrotask: 'readonly',
        structuredClone: 'readonly',
        fetch: 'readonly',
        Response: 'readonly',
        Request: 'readonly',
        Headers: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  // Drivers: no driver imports another (rtb may use relent/delivery's public entry point).
  ...DRIVERS.map((d) => ({ files: [`src/${d}/**/*.ts`], rules: { 'no-restricted-imports': layerRule(d, d === 'rtb' ? ['../delivery/index.js'] : []) } })),
  // Below the drivers: presets, shared, run and testing import no driver and not the CLI.
  { files: ['src/presets/**/*.ts'], rules: { 'no-restricted-imports': layerRule('presets', [], ['shared', 'run']) } },
  { files: ['src/shared/**/*.ts'], rules: { 'no-restricted-imports': layerRule('shared', [], ['run']) } },
  ...['run', 'testing'].map((d) => ({ files: [`src/${d}/**/*.ts`], rules: { 'no-restricted-imports': layerRule(d) } })),
  {
    // Type-aware rules on the sources: every switch over a union names every case (a new
    // command or decision kind fails lint where it is not handled), and no promise is
    // dropped without a decision (`void` marks the ones left on purpose).
    files: ['src/**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/no-floating-promises': 'error',
    },
  },
  {
    // The decision core is pure: no clocks, no randomness, no I/O, no Node modules.
    files: ['src/core/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: ['node:*', '../*', 'undici', 'fs', 'http', 'https', 'net'] }],
      'no-restricted-globals': ['error', 'setTimeout', 'setInterval', 'setImmediate', 'performance', 'process', 'fetch'],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'The core takes time as an argument.' },
        { object: 'Math', property: 'random', message: 'The core takes randomness as an argument.' },
      ],
    },
  },
);
