// Tom Select: the native <select> is hidden and replaced by a searchable control whose
// options are rendered on demand into a dropdown.
import 'tom-select/dist/css/tom-select.css';
import TomSelect from 'tom-select';
import { report } from './report.js';

const select = new TomSelect('#language', { create: false, maxOptions: 50 });
document.getElementById('save').addEventListener('click', async () => {
  const value = { language: select.getValue() };
  document.getElementById('saved').textContent = 'Saved: ' + (await report('tomselect', value));
});
