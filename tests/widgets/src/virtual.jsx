// React + react-window: a virtualised list of 500 rows; only the rows in view are in the DOM.
import { useState } from 'react';
import { createRoot } from 'react-dom/client';
import { List } from 'react-window';
import { report } from './report.js';

function Row({ index, style, onPick }) {
  return (
    <div style={{ ...style, display: 'flex', gap: 8, alignItems: 'center' }}>
      <span>Invoice {index + 1}</span>
      <button onClick={() => onPick(index + 1)}>Open invoice {index + 1}</button>
    </div>
  );
}

function App() {
  const [picked, setPicked] = useState('');
  const onPick = async (n) => setPicked(await report('virtual', { invoice: n }));
  return (
    <div style={{ margin: 16 }}>
      <h1>Invoices</h1>
      {picked && <p>Opened: {picked}</p>}
      <div style={{ width: 360, border: '1px solid #888' }}>
        <List rowComponent={Row} rowCount={500} rowHeight={30} rowProps={{ onPick }} style={{ height: 300 }} />
      </div>
    </div>
  );
}

createRoot(document.getElementById('root')).render(<App />);
