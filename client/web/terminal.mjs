// A lease's terminal on the market page: xterm.js (the terminal emulator VS Code and JupyterLab
// use), sized to its element by its fit addon, so full-screen programs (vim, top) draw as they
// would in a local terminal. wallet.js connects it to the lease's stream.
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import '@xterm/xterm/css/xterm.css';

export { Terminal, FitAddon };
