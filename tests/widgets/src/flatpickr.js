// Flatpickr: a readonly input that opens a calendar; a day is chosen by clicking it.
import 'flatpickr/dist/flatpickr.css';
import flatpickr from 'flatpickr';
import { report } from './report.js';

const picker = flatpickr('#departure', {
  dateFormat: 'Y-m-d',
  defaultDate: '2027-03-01',
  onChange: (_, text) => {
    document.getElementById('chosen').textContent = 'Departure: ' + text;
  },
});
document.getElementById('book').addEventListener('click', async () => {
  const value = { departure: picker.input.value };
  document.getElementById('saved').textContent = 'Booked: ' + (await report('flatpickr', value));
});
